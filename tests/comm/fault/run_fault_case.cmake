# Runs comm_fault_program under mpirun and checks that the job fails as it should: a non-zero
# exit within MAX_SECONDS, with output (stdout and stderr together) matching every EXPECT_<k>.
#   cmake -DMPIEXEC=mpirun -DNP=2 -DPROGRAM=comm_fault_program -DSCENARIO=stall -DTIMEOUT_MS=3000
#         -DMAX_SECONDS=30 [-DMPI_FLAGS=a,b] -DEXPECT_1=regex [-DEXPECT_2=...] -P run_fault_case.cmake
# MPI_FLAGS is comma-separated (a ';' would split the ctest command line).
foreach(var MPIEXEC NP PROGRAM SCENARIO TIMEOUT_MS MAX_SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fault_case.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "," ";" mpi_flags "${MPI_FLAGS}")

# mpirun's own --timeout is the cleanup if nothing else ends the job (it kills every rank, which
# a timeout of execute_process would not); the elapsed-time check below still fails such a run.
math(EXPR mpirun_timeout "${MAX_SECONDS} + 10")
math(EXPR hard_timeout "${MAX_SECONDS} + 30")
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} -np ${NP} --oversubscribe --allow-run-as-root --bind-to none
          --timeout ${mpirun_timeout} ${mpi_flags} ${PROGRAM} ${SCENARIO} ${TIMEOUT_MS}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out  # the same variable: one interleaved log
  TIMEOUT ${hard_timeout})
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")

set(problems "")
if(rc STREQUAL "0")
  string(APPEND problems "\n- the job exited 0; it should have failed")
elseif(NOT rc MATCHES "^[0-9]+$")
  string(APPEND problems "\n- mpirun did not exit by itself: ${rc}")
endif()
if(elapsed GREATER MAX_SECONDS)
  string(APPEND problems "\n- the job took ${elapsed} s, more than ${MAX_SECONDS} s")
endif()
foreach(k RANGE 1 9)
  if(DEFINED EXPECT_${k} AND NOT out MATCHES "${EXPECT_${k}}")
    string(APPEND problems "\n- the output does not match: ${EXPECT_${k}}")
  endif()
endforeach()

set(summary "${SCENARIO} on ${NP} ranks: exit status ${rc} after ${elapsed} s")
if(problems)
  message(FATAL_ERROR "${summary}${problems}\n--- output ---\n${out}")
endif()
message(STATUS "${summary}, as expected\n--- output ---\n${out}")
