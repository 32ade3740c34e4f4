// vmtrack: what the registration cache does on this machine (info), how fast it is (bench),
// and whether it is ever stale (check).
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "vmtrack.h"

static void usage(FILE *to)
{
    fprintf(to,
            "usage: vmtrack COMMAND [OPTIONS]\n"
            "  info   [--json] [--measure]\n"
            "                           version, tracker in use and why, devices, limits, environment;\n"
            "                           --measure: what the tracker costs on unmapping and on a miss\n"
            "  bench  [--json] [--compare-ucx] [--quick] [--tracker NAME]\n"
            "                           hit and miss costs, thread scaling, memory per entry\n"
            "  check  [--json] [--tracker NAME]\n"
            "                           the stale-registration scenarios, per tracker\n"
            "  version                  print the version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "info") == 0)
        return vmtrack_cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return vmtrack_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0)
        return vmtrack_cmd_check(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("vmtrack %s\n", vmt_version());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vmtrack: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
