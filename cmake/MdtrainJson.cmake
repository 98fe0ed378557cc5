# nlohmann/json, the JSON parser and serializer behind mdtrain::Json (header-only, used only in
# core/json.cpp: the installed headers and the CMake package never need it).
#
# Where it comes from:
#   - pip builds (SKBUILD): the `nlohmann-json` PyPI package, a build requirement in
#     pyproject.toml; it ships the headers (nlohmann_json/include) and no CMake config, so its
#     include directory is asked from the build's Python.
#   - plain CMake builds: find_package(nlohmann_json), e.g. Debian's nlohmann-json3-dev
#     (scripts/system_deps.sh installs it), or any prefix in CMAKE_PREFIX_PATH.
# Either way the result is the target nlohmann_json::nlohmann_json.

set(_mdtrain_json_hint "")
if(SKBUILD OR MDTRAIN_PYTHON)
  find_package(Python 3.9 COMPONENTS Interpreter QUIET)
  if(Python_EXECUTABLE)
    # find_spec, not import: the package's __init__ imports importlib_resources, which a build
    # environment need not have.
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
              "import importlib.util, os; s = importlib.util.find_spec('nlohmann_json'); print(os.path.join(os.path.dirname(s.origin), 'include') if s else '')"
      OUTPUT_VARIABLE _mdtrain_json_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()

if(_mdtrain_json_hint AND EXISTS "${_mdtrain_json_hint}/nlohmann/json.hpp" AND NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mdtrain_json_hint}")
  message(STATUS "mdtrain: nlohmann/json from the Python package nlohmann-json (${_mdtrain_json_hint})")
else()
  find_package(nlohmann_json 3.9 CONFIG QUIET)
  if(nlohmann_json_FOUND)
    message(STATUS "mdtrain: nlohmann/json ${nlohmann_json_VERSION} from ${nlohmann_json_DIR}")
  endif()
endif()

if(NOT TARGET nlohmann_json::nlohmann_json)
  message(FATAL_ERROR
    "mdtrain needs nlohmann/json (header-only JSON library) and found none. Install one of:\n"
    "  - Debian/Ubuntu: apt-get install nlohmann-json3-dev   (or scripts/system_deps.sh)\n"
    "  - PyPI: pip install nlohmann-json   (pip builds of mdtrain get it as a build requirement)\n"
    "  - any nlohmann_json CMake package: -DCMAKE_PREFIX_PATH=<its prefix> or -Dnlohmann_json_DIR=<dir>")
endif()
