# Built-in devices: io_uring fixed buffers and RDMA verbs.
libvmtrack_la_SOURCES += common/dev_iouring.cc common/dev_verbs.cc
