from kiln_tool.cli import main

raise SystemExit(main())
