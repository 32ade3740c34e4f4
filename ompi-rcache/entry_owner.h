/* Who a function's entry belongs to after patchers have been at it: the shared object its first
 * instruction jumps into (through a trampoline in anonymous memory if there is one), or the
 * object the function itself is in when it is unpatched. Used by the component's guard and by
 * the tests that check vmtrack is the only patcher. No Open MPI headers. */
#ifndef OMPI_RCACHE_VMTRACK_ENTRY_OWNER_H
#define OMPI_RCACHE_VMTRACK_ENTRY_OWNER_H

/* A file name ("/.../libvmtrack.so.0", "/.../libopen-pal.so.40", "/.../libc.so.6"), or a
 * description when the jump leads nowhere known. Never NULL; the string is static. */
const char *vmt_ompi_entry_owner(const void *entry);

#endif
