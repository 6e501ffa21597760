# Installation (`cmake --install build`, GNUInstallDirs) and the Debian packages CPack makes from it
# (`scripts/package.sh`, docs/operations.md "Install on real nodes"). One component per package,
# split as admins deploy them:
#   schedd  -> mlsched-schedd   schedd, mlreport, mlsched-certs, the unit, the `mlsched` system user
#                               (sysusers.d), /etc/mlsched/{policy.toml,schedd.env} (conffiles)
#   agentd  -> mlsched-agentd   agentd, its unit (Delegate=yes), /etc/mlsched/agentd.env (conffile)
#   client  -> mlsched-client   mlsub, mlq, mlcancel, mladmin, mlrun, mlalloc, mlacct
#   trainer -> mlsched-trainer  mltrain, the CPU (Gloo) build: in a CUDA build its mltrain_cpu
#                               (trainer/CMakeLists.txt)
#   trainer_cuda -> mlsched-trainer-cuda  mltrain with the GPU path, only when this build has it
#                               (it then needs the CUDA runtime, cuBLAS and NCCL on the loader
#                               path, as NVIDIA's own packages set it up)
# Depends come from dpkg-shlibdeps, plus what the maintainer scripts run. Units go to
# /lib/systemd/system (Debian 12's place), configuration to /etc/mlsched, sysusers.d to /usr/lib,
# binaries of daemons to /usr/sbin.
include(GNUInstallDirs)

set(_deb ${CMAKE_CURRENT_SOURCE_DIR}/deploy/debian)
set(_unitdir /lib/systemd/system)
set(_confdir /etc/mlsched)  # absolute, as the unit: where the services read it (stage with DESTDIR)

if(MLSCHED_BUILD_DAEMONS)
  install(TARGETS schedd RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT schedd)
  install(TARGETS mlreport RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT schedd)
  install(PROGRAMS scripts/mlsched-certs.sh DESTINATION ${CMAKE_INSTALL_SBINDIR}
          RENAME mlsched-certs COMPONENT schedd)
  install(FILES deploy/systemd/mlsched-schedd.service DESTINATION ${_unitdir} COMPONENT schedd)
  install(FILES ${_deb}/mlsched.sysusers DESTINATION /usr/lib/sysusers.d
          RENAME mlsched.conf COMPONENT schedd)
  install(FILES deploy/systemd/schedd.env DESTINATION ${_confdir} COMPONENT schedd)
  install(FILES policies/default.toml DESTINATION ${_confdir}
          RENAME policy.toml COMPONENT schedd)
  install(DIRECTORY policies/ DESTINATION ${CMAKE_INSTALL_DATADIR}/mlsched/policies COMPONENT schedd
          FILES_MATCHING PATTERN "*.toml" PATTERN "README.md")
  install(FILES deploy/grafana/mlsched.json deploy/prometheus/mlsched-alerts.yml
          DESTINATION ${CMAKE_INSTALL_DATADIR}/mlsched/monitoring COMPONENT schedd)

  install(TARGETS agentd RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT agentd)
  install(FILES deploy/systemd/mlsched-agentd.service DESTINATION ${_unitdir} COMPONENT agentd)
  install(FILES deploy/systemd/agentd.env DESTINATION ${_confdir} COMPONENT agentd)

  install(TARGETS mlsub mlq mlcancel mladmin mlrun mlalloc mlacct
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT client)
endif()
set(_packaged_components schedd agentd client trainer)
if(MLSCHED_BUILD_TRAINER)
  if(MLSCHED_TRAINER_CUDA)
    install(TARGETS mltrain_cpu RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT trainer)
    install(TARGETS mltrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT trainer_cuda)
    list(APPEND _packaged_components trainer_cuda)
  else()
    install(TARGETS mltrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT trainer)
  endif()
endif()
# What the packages hold, built by scripts/package.sh (`ninja mlsched_packaged`), not the tests.
add_custom_target(mlsched_packaged)
foreach(t schedd agentd mlreport mlsub mlq mlcancel mladmin mlrun mlalloc mlacct mltrain mltrain_cpu)
  if(TARGET ${t})
    add_dependencies(mlsched_packaged ${t})
  endif()
endforeach()

# Each package's /usr/share/doc/PACKAGE: the copyright file (machine-readable) and a Debian
# changelog (native package: changelog.gz), compressed reproducibly (gzip -n, as dh_compress).
set(_docs ${CMAKE_CURRENT_BINARY_DIR}/debian-docs)
file(MAKE_DIRECTORY ${_docs})
execute_process(COMMAND sh -c "gzip -9nc '${_deb}/changelog' > '${_docs}/changelog.gz'")
foreach(comp ${_packaged_components})
  string(REPLACE "_" "-" _pkg "mlsched-${comp}")
  install(FILES ${_deb}/copyright ${_docs}/changelog.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${_pkg}
          COMPONENT ${comp})
endforeach()
if(MLSCHED_BUILD_DAEMONS)
  install(FILES docs/operations.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/mlsched-schedd COMPONENT schedd)
  install(FILES docs/operations.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/mlsched-agentd COMPONENT agentd)
endif()

# ---- CPack: Debian packages ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mlsched)
set(CPACK_PACKAGE_VENDOR "mlsched")
set(CPACK_PACKAGE_CONTACT "mlsched maintainers <maintainers@mlsched.dev>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING IGNORE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://mlsched.dev")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENTS_ALL ${_packaged_components})

set(CPACK_DEBIAN_SCHEDD_PACKAGE_NAME mlsched-schedd)
set(CPACK_DEBIAN_SCHEDD_PACKAGE_DEPENDS "munge, init-system-helpers (>= 1.54), adduser")
set(CPACK_DEBIAN_SCHEDD_PACKAGE_SUGGESTS "etcd-server, mlsched-client")
set(CPACK_DEBIAN_SCHEDD_PACKAGE_CONTROL_EXTRA
    "${_deb}/schedd/conffiles;${_deb}/schedd/postinst;${_deb}/schedd/prerm;${_deb}/schedd/postrm")
set(CPACK_COMPONENT_SCHEDD_DESCRIPTION "mlsched batch scheduler: central daemon
schedd is the central scheduler of an mlsched cluster: gang scheduling,
backfill, multifactor priority with hierarchical fairshare, quotas and
preemption for machine-learning jobs on GPU and CPU nodes. It keeps its state
in SQLite (or in etcd for high availability) and runs as the mlsched system
user. This package also has mlreport (usage reports) and mlsched-certs (the
cluster's TLS material).")

set(CPACK_DEBIAN_AGENTD_PACKAGE_NAME mlsched-agentd)
set(CPACK_DEBIAN_AGENTD_PACKAGE_DEPENDS "init-system-helpers (>= 1.54)")
set(CPACK_DEBIAN_AGENTD_PACKAGE_RECOMMENDS "runc, skopeo, umoci, tini, elfutils")
set(CPACK_DEBIAN_AGENTD_PACKAGE_CONTROL_EXTRA
    "${_deb}/agentd/conffiles;${_deb}/agentd/postinst;${_deb}/agentd/prerm;${_deb}/agentd/postrm")
set(CPACK_COMPONENT_AGENTD_DESCRIPTION "mlsched batch scheduler: node agent
agentd runs on every compute node of an mlsched cluster, as root: it registers
the node with schedd, heartbeats, and launches the tasks of jobs as their users
in cgroups of their own (the unit delegates its cgroup), optionally in OCI
containers, and reports node health and GPU utilization.")

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME mlsched-client)
set(CPACK_DEBIAN_CLIENT_PACKAGE_DEPENDS "munge")
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION "mlsched batch scheduler: user commands
The commands users and operators run against an mlsched cluster: mlsub
(submit), mlq (queue), mlcancel, mladmin, mlrun and mlalloc (interactive steps
and allocations) and mlacct (accounting). Callers prove who they are with MUNGE
over TLS, or through schedd's Unix socket on the controller.")

set(_trainer_text "mlsched batch scheduler: data-parallel trainer
mltrain trains a classifier on Fashion-MNIST data-parallel over any number of
ranks, checkpoints to S3 or a directory, exits 75 when preempted and resumes on
any world size: the example job of an mlsched cluster.")
set(CPACK_DEBIAN_TRAINER_PACKAGE_NAME mlsched-trainer)
set(CPACK_DEBIAN_TRAINER_PACKAGE_SECTION science)
set(CPACK_DEBIAN_TRAINER_PACKAGE_RECOMMENDS "dataset-fashion-mnist")
set(CPACK_COMPONENT_TRAINER_DESCRIPTION "${_trainer_text}
This build has the CPU path (Gloo, OpenBLAS).")
if(MLSCHED_TRAINER_CUDA)
  set(CPACK_DEBIAN_TRAINER_CUDA_PACKAGE_NAME mlsched-trainer-cuda)
  set(CPACK_DEBIAN_TRAINER_CUDA_PACKAGE_PROVIDES mlsched-trainer)
  set(CPACK_DEBIAN_TRAINER_CUDA_PACKAGE_CONFLICTS mlsched-trainer)
  set(CPACK_DEBIAN_TRAINER_CUDA_PACKAGE_REPLACES mlsched-trainer)
  set(CPACK_DEBIAN_TRAINER_CUDA_PACKAGE_SECTION science)
  set(CPACK_DEBIAN_TRAINER_CUDA_PACKAGE_RECOMMENDS "dataset-fashion-mnist")
  set(CPACK_COMPONENT_TRAINER_CUDA_DESCRIPTION "${_trainer_text}
This build has the GPU path (NCCL, cuBLAS, bf16): the CUDA runtime,
cuBLAS and NCCL must be on the loader path (ld.so.conf.d).")
endif()

include(CPack)
