# Runs mlsim twice on the same trace and fails unless the JSON, per-job CSV and --plot SVG are
# identical and the JSON has the required keys. Inputs: MLSIM, TRACE, WORKDIR.
file(MAKE_DIRECTORY ${WORKDIR})
foreach(run a b)
  execute_process(COMMAND ${MLSIM} --trace ${TRACE} --json --jobs-csv ${WORKDIR}/${run}.csv
                          --plot ${WORKDIR}/${run}.svg
                  OUTPUT_FILE ${WORKDIR}/${run}.json RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mlsim exited with ${rc}")
  endif()
endforeach()
foreach(ext json csv svg)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORKDIR}/a.${ext} ${WORKDIR}/b.${ext}
                  RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "mlsim output differs between two identical runs (${ext})")
  endif()
endforeach()
file(READ ${WORKDIR}/a.json json)
foreach(key jobs mean_wait_s p95_wait_s mean_bounded_slowdown utilization makespan_s)
  string(JSON value ERROR_VARIABLE err GET "${json}" ${key})
  if(err)
    message(FATAL_ERROR "mlsim --json lacks '${key}': ${err}")
  endif()
endforeach()
