# Included by tests/CMakeLists.txt: each fuzz target built with the project's compiler against
# the project's libraries, replaying its seed corpus (tests/fuzz/corpus/<name>/) as a ctest test,
# so every test run checks the seeds even where clang/libFuzzer is absent. Fuzzing itself:
# tests/fuzz/run_fuzzers.sh.
set(dptrain_fuzz_dir ${CMAKE_CURRENT_LIST_DIR})
foreach(target_and_lib fuzz_config:dptrain_launch fuzz_idx:dptrain_runtime fuzz_safetensors:dptrain_runtime)
  string(REPLACE ":" ";" parts ${target_and_lib})
  list(GET parts 0 target)
  list(GET parts 1 library)
  string(REPLACE "fuzz_" "" corpus ${target})
  add_executable(${target}_replay ${dptrain_fuzz_dir}/${target}.cpp ${dptrain_fuzz_dir}/replay_main.cpp)
  target_include_directories(${target}_replay PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${target}_replay PRIVATE ${library})
  add_test(NAME fuzz_replay.${corpus} COMMAND ${target}_replay ${dptrain_fuzz_dir}/corpus/${corpus})
  set_tests_properties(fuzz_replay.${corpus} PROPERTIES TIMEOUT 120 LABELS fuzz)
endforeach()
