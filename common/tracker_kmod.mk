# The client of kmod/vmtrack.ko (/dev/vmtrack): the "kmod" tracker.
libvmtrack_la_SOURCES += common/tracker_kmod.cc kmod/uapi/vmtrack_kmod.h
