# Running kiln's Python side from CMake.
include_guard(GLOBAL)

# kiln_run_python(<module> <what> [ARGS <arg>...] [OUTPUT_VARIABLE <var>])
#   Runs `python -m kiln_tool.<module> <args>` with the Python that builds (Python_EXECUTABLE, which
#   scikit-build-core sets) and PYTHONPATH = KILN_PYTHONPATH, so the kiln_tool next to this CMake
#   package answers, whatever else is installed. A failure stops the configure step with <what>, the
#   command's exit status and its stderr. kiln_tool's modules need the standard library and
#   `packaging` only.
function(kiln_run_python module what)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "OUTPUT_VARIABLE" "ARGS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_run_python(${module}): unexpected arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT Python_EXECUTABLE)
    message(FATAL_ERROR "kiln: ${what}: Python_EXECUTABLE is not set; build through scikit-build-core "
                        "(pip wheel, python -m build, kiln wheels) or pass -DPython_EXECUTABLE=<the build venv's python>")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${KILN_PYTHONPATH}"
            "${Python_EXECUTABLE}" -m "kiln_tool.${module}" ${arg_ARGS}
    OUTPUT_VARIABLE out
    ERROR_VARIABLE err
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(STRIP "${err}" err)
    message(FATAL_ERROR "kiln: ${what} failed (python -m kiln_tool.${module}, exit ${rc}):\n${err}")
  endif()
  if(arg_OUTPUT_VARIABLE)
    set(${arg_OUTPUT_VARIABLE} "${out}" PARENT_SCOPE)
  endif()
endfunction()
