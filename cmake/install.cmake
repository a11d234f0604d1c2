# What `cmake --install` and CPack ship: the programs a server needs and the task data they
# read at run time (tasks/ and kernels/ under share/crucible, found by `crucible` beside its
# bin/ folder, so an unpacked tree runs from anywhere without the source tree).
include(GNUInstallDirs)

# The CUDA libraries (NVRTC, CUPTI) are found through the toolkit's folder, kept as RPATH.
set_target_properties(crucible crucible-compile-worker crucible-gpu-runner
                      PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS crucible crucible-compile-worker crucible-gpu-runner
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Manifests, reference and example sources, captured values and the parity modules manifests
# name; not the C++ that is compiled into the programs.
set(crucible_not_data PATTERN "*.cpp" EXCLUDE PATTERN "*.hpp" EXCLUDE PATTERN "CMakeLists.txt"
                      EXCLUDE PATTERN "__pycache__" EXCLUDE)
install(DIRECTORY tasks/ DESTINATION ${CMAKE_INSTALL_DATADIR}/crucible/tasks ${crucible_not_data})
install(DIRECTORY kernels/ DESTINATION ${CMAKE_INSTALL_DATADIR}/crucible/kernels
        ${crucible_not_data})
install(DIRECTORY models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/crucible/models)
install(FILES LICENSE README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/crucible)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/crucible/docs)

# cpack -G TGZ: a relocatable archive (bin/, share/); cpack -G DEB: a Debian package (under
# /usr, CPack's default for DEB). Programs are stripped.
set(CPACK_PACKAGE_NAME crucible)
set(CPACK_PACKAGE_VENDOR "crucible")
set(CPACK_PACKAGE_CONTACT "crucible maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "RL environment server for GPU-kernel-generation agents (NVRTC, CUPTI, ZeroMQ)")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGE_FILE_NAME "crucible-${PROJECT_VERSION}-linux-x86_64")
set(CPACK_GENERATOR TGZ)
set(CPACK_STRIP_FILES ON)
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Debian 12 names; the CUDA toolkit (NVRTC, CUPTI, the driver) is NVIDIA's and not a Debian
# dependency: the server says at start which of its stages cannot run without it.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libzmq5, libseccomp2, libtomlplusplus3, libcpp-httplib0.11, libstdc++6 (>= 12), libc6 (>= 2.36)")
include(CPack)
