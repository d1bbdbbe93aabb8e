# `cmake --install BUILD [--prefix P]`: the libraries, public headers under include/ecstore/,
# the ec-store binary, ecstoreConfig.cmake (find_package(ecstore)) and ecstore.pc.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Shared libraries find each other, and ec-store finds them, wherever the prefix is.
if(BUILD_SHARED_LIBS)
  set_target_properties(ecstore_base ecstore_cuda ecstore_cache ecstore_store ecstore_rdma ecstore_net ecstore_server
                        ecstore_ops ecstore_cluster PROPERTIES INSTALL_RPATH "$ORIGIN")
  set_target_properties(ec-store PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()
install(TARGETS ecstore_base ecstore_cuda ecstore_cache ecstore_store ecstore_rdma ecstore_net ecstore_server ecstore_cluster ecstore EXPORT ecstoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ec-store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers (include/ecstore/) and the library headers they include, with the layout
# their #includes expect; tests/consumer/run.sh checks this list against the includes.
install(DIRECTORY include/ecstore/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore
        FILES_MATCHING PATTERN "*.h")
install(FILES base/copy_pool.h base/entry_record.h base/env.h base/host_port.h base/log.h
              base/memory_backend.h base/mutex.h base/status.h base/tensor_meta.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/base)
install(FILES cache/buffer_io.h cache/cache.h cache/cache_parts.h cache/device_load.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/cache)
install(FILES store/store.h store/entry_hooks.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/store)
install(FILES net/claims.h net/client.h net/connection.h net/device_put.h net/frame_stream.h
              net/lease_generation.h net/op_table.h net/protocol.h net/put_arena.h net/remote_admin.h net/shm_reads.h net/socket.h net/stream.h net/tls.h net/transport.h net/transport_choice.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/net)
install(FILES server/arena_puts.h server/claim_table.h server/device_puts.h
              server/lease_table.h server/list_cursor.h server/piece_checker.h server/prefetcher.h
              server/request_record.h server/server.h server/server_metrics.h server/server_transport.h server/acl.h server/gate.h server/peer_access.h
              server/acceptor.h server/conn_table.h server/event_loop.h server/reply_outbox.h
              server/request_arrival.h server/server_conn.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/server)
install(FILES rdma/verbs.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/rdma)
install(FILES cluster/cluster_cache.h cluster/etcd.h cluster/member_watch.h cluster/membership.h
              cluster/node_link.h cluster/placement.h
              cluster/slot_table.h cluster/cluster_view.h cluster/link_registry.h cluster/consistency.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/cluster)
install(FILES cuda/cuda.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ecstore/cuda)

set(EC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ecstore)
install(EXPORT ecstoreTargets NAMESPACE ecstore:: DESTINATION ${EC_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/ecstoreConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/ecstoreConfig.cmake
                              INSTALL_DESTINATION ${EC_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ecstoreConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ecstoreConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ecstoreConfigVersion.cmake
        DESTINATION ${EC_CMAKE_DIR})

# Static libraries carry none of their dependencies: a plain `pkg-config --libs ecstore`
# must name them (Requires), not only --static (Requires.private). Shared ones link their
# own. cpp-httplib is named as a library, not required: its .pc file's Cflags would hand
# its build's defines to every consumer, and no public header includes it.
set(EC_PC_DEPS "liburing liblz4 sqlite3 libxxhash spdlog libssl libcrypto")
set(EC_PC_LIBS "")
if(BUILD_SHARED_LIBS)
  set(EC_PC_REQUIRES "")
  set(EC_PC_REQUIRES_PRIVATE "${EC_PC_DEPS}")
else()
  set(EC_PC_REQUIRES "${EC_PC_DEPS}")
  set(EC_PC_REQUIRES_PRIVATE "")
  list(TRANSFORM HTTPLIB_LIBRARIES PREPEND "-l" OUTPUT_VARIABLE EC_PC_LIBS)
  # The CUDA runtime has no .pc file and lies where the toolkit was installed: a static
  # build installs its static runtime beside the libraries (it is redistributable), so the
  # .pc file names no path of the building machine.
  if(EC_CUDA)
    install(FILES "${CUDAToolkit_LIBRARY_DIR}/libcudart_static.a"
            DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libecstore_cudart.a)
    set(EC_PC_LIBS "${EC_PC_LIBS} -lecstore_cudart -ldl -lrt")
  endif()
endif()
string(REPLACE ";" " " EC_PC_LIBS "${EC_PC_LIBS}")
# Relocatable: the prefix is found from where the .pc file lies, whatever --prefix was.
file(RELATIVE_PATH EC_PC_UP /x/${CMAKE_INSTALL_LIBDIR}/pkgconfig /x)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/ecstore.pc.in
               ${CMAKE_CURRENT_BINARY_DIR}/ecstore.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ecstore.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The deployment files: the systemd unit and its settings file, as docs/operations.md uses them.
install(FILES packaging/ec-store.service packaging/ec-store.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ec-store)
