# The manual pages (written in man(7) macros): the command in section 1, the library's
# functions in section 3 (one page per function or family; the rest are ".so" links), the
# overview and the environment in section 7. test/check_man.sh checks this list against doc/man/.
dist_man_MANS = \
	doc/man/man1/vmtrack.1 \
	doc/man/man3/vmt_cache_create.3 \
	doc/man/man3/vmt_cache_destroy.3 \
	doc/man/man3/vmt_cache_tracker.3 \
	doc/man/man3/vmt_cache_tracker_report.3 \
	doc/man/man3/vmt_changed_since.3 \
	doc/man/man3/vmt_changes_mark.3 \
	doc/man/man3/vmt_check_version.3 \
	doc/man/man3/vmt_device_attach.3 \
	doc/man/man3/vmt_device_ctx.3 \
	doc/man/man3/vmt_device_detach.3 \
	doc/man/man3/vmt_device_flush.3 \
	doc/man/man3/vmt_flush.3 \
	doc/man/man3/vmt_get.3 \
	doc/man/man3/vmt_get_handle.3 \
	doc/man/man3/vmt_get_handle_walk.3 \
	doc/man/man3/vmt_get_memo.3 \
	doc/man/man3/vmt_invalidate.3 \
	doc/man/man3/vmt_iouring_attach.3 \
	doc/man/man3/vmt_iouring_detach.3 \
	doc/man/man3/vmt_iouring_index.3 \
	doc/man/man3/vmt_put.3 \
	doc/man/man3/vmt_reg_access.3 \
	doc/man/man3/vmt_reg_addr.3 \
	doc/man/man3/vmt_reg_handle.3 \
	doc/man/man3/vmt_reg_invalidate.3 \
	doc/man/man3/vmt_reg_len.3 \
	doc/man/man3/vmt_set_log_fn.3 \
	doc/man/man3/vmt_set_log_level.3 \
	doc/man/man3/vmt_shared.3 \
	doc/man/man3/vmt_stats_get.3 \
	doc/man/man3/vmt_strerror.3 \
	doc/man/man3/vmt_subscribe.3 \
	doc/man/man3/vmt_unsubscribe.3 \
	doc/man/man3/vmt_verbs_attach.3 \
	doc/man/man3/vmt_verbs_mr.3 \
	doc/man/man3/vmt_version.3 \
	doc/man/man3/vmtrack.3 \
	doc/man/man7/vmtrack.7

TESTS += test/check_man.sh
EXTRA_DIST += test/check_man.sh
