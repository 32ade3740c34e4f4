# test/install/: `make installcheck` (after `make install [DESTDIR=...]`) builds and runs a
# program against the installed tree through `pkg-config vmtrack` only, and with DESTDIR
# checks that nothing was installed outside the prefix. scripts/packages runs it on the
# installed Debian packages too.
EXTRA_DIST += test/install/check-install.sh test/install/consumer.c

installcheck-local:
	$(SHELL) $(srcdir)/test/install/check-install.sh $${DESTDIR:+--root "$(DESTDIR)"} \
	  --prefix $(prefix)
