# (tests of the Open MPI component: filled in below)
