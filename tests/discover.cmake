# Writes one add_test per case of a fgtest binary (see tests/CMakeLists.txt).
execute_process(COMMAND ${BIN} --list OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BIN} --list failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line ${lines})
  if(line STREQUAL "")
    continue()
  endif()
  string(REPLACE " " ";" parts "${line}")
  list(GET parts 0 case)
  # Labels are comma-separated; a space between them counts as a comma too,
  # so "gpu badinput" does not silently lose its second label.
  list(REMOVE_AT parts 0)
  list(JOIN parts "," labels)
  string(APPEND content "add_test(${NAME}.${case} \"${BIN}\" ${case})\n")
  set(props "SKIP_RETURN_CODE 77 WORKING_DIRECTORY \"${WORKDIR}\"")
  # A gpu case runs alone: the cases share one device, and what one reads
  # device-wide (cudaMemGetInfo in the leak check) moves with every other
  # process's allocations. Where no GPU exists these cases skip at once.
  if(labels MATCHES "(^|,)gpu(,|$)")
    set(props "${props} RUN_SERIAL TRUE")
  endif()
  # A case labelled slow (10 s or more under the sanitizers) starts before
  # the others when ctest has no timings of its own yet (a fresh build):
  # otherwise a long case late in the list runs on while the other cores
  # idle at the end of the suite.
  if(labels MATCHES "(^|,)slow(,|$)")
    set(props "${props} COST 1000")
  endif()
  if(NOT labels STREQUAL "-")
    string(REPLACE "," ";" labels "${labels}")
    set(props "${props} LABELS \"${labels}\"")
  endif()
  string(APPEND content "set_tests_properties(${NAME}.${case} PROPERTIES ${props})\n")
endforeach()
file(WRITE ${OUT} "${content}")
