# Runs the mlsim binary with every policy file the project ships (policies/ recursively and
# schedd/sim/policies/), the files schedd reads, on the first jobs of a trace; fails on the first
# file mlsim refuses. Inputs: MLSIM, TRACE, POLICIES and SIM_POLICIES (the two directories).
set(files)
foreach(dir ${POLICIES} ${SIM_POLICIES})
  file(GLOB_RECURSE found ${dir}/*.toml)
  list(APPEND files ${found})
endforeach()
list(LENGTH files count)
if(count LESS 6)
  message(FATAL_ERROR "expected at least 6 policy files under ${POLICIES} and ${SIM_POLICIES}, found ${count}")
endif()
foreach(policy ${files})
  execute_process(COMMAND ${MLSIM} --trace ${TRACE} --max-jobs 200 --policy ${policy} --json
                  OUTPUT_VARIABLE json ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mlsim --policy ${policy} exited with ${rc}: ${err}")
  endif()
  string(JSON jobs GET "${json}" jobs)
  if(NOT jobs EQUAL 200)
    message(FATAL_ERROR "mlsim --policy ${policy} replayed ${jobs} jobs, not 200")
  endif()
  message(STATUS "mlsim --policy ${policy}: ${jobs} jobs")
endforeach()
