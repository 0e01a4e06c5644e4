# plan/: the named machines (src/plan/machines.json) compiled into mtc_lib
# as one C string, so `mtc plan --machine dgx-a100` needs no installed data
# file; editing the JSON re-runs the configure step.
file(READ ${CMAKE_SOURCE_DIR}/src/plan/machines.json MTC_PLAN_MACHINES_HEX HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," MTC_PLAN_MACHINES_HEX "${MTC_PLAN_MACHINES_HEX}")
configure_file(${CMAKE_SOURCE_DIR}/src/plan/machines.c.in
  ${CMAKE_BINARY_DIR}/generated/plan_machines.c @ONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/plan/machines.json)
target_sources(mtc_lib PRIVATE ${CMAKE_BINARY_DIR}/generated/plan_machines.c)
