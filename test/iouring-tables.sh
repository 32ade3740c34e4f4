#!/bin/sh
# The io_uring device's tables for kernels without sparse tables (Linux < 5.19: "tagged") and
# without buffer updates (< 5.13: "whole"), forced on this kernel: test_iouring on each.
status=0
for table in tagged whole; do
	echo "== test_iouring with VMTRACK_IOURING_TABLE=$table"
	VMTRACK_IOURING_TABLE=$table ./test/test_iouring
	rc=$?
	[ "$rc" = 77 ] && exit 77
	[ "$rc" = 0 ] || status=1
done
exit $status
