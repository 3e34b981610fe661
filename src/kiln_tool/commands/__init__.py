"""One module per kiln command. Each defines:

    HELP: str                                   one line for `kiln --help`
    configure_parser(parser) -> None            add the command's arguments
    execute(args) -> int                        run it; return the exit code

Modules are imported only when their command runs, so `kiln --help` and
commands that need no heavy dependency stay fast.
"""
