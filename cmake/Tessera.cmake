# tessera_test(NAME SOURCES a_test.cc ... LIBS lib ...)
# One GoogleTest executable per component; tests are discovered into ctest and
# run from the source root so that scenario folders resolve the same everywhere.
function(tessera_test name)
  if(NOT TESSERA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    DISCOVERY_TIMEOUT 60
    # One entry per property: gtest_discover_tests splits list values, so two variables in
    # one ENVIRONMENT string would reach the tests as one broken variable.
    PROPERTIES ENVIRONMENT "TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
               ENVIRONMENT_MODIFICATION "TESSERA_BINARY=set:$<TARGET_FILE:tessera>")
  # End-to-end tests run the real binary: build it before the tests.
  add_dependencies(${name} tessera)
endfunction()
