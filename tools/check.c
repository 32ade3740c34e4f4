/* `vmtrack check`: run the scenario suite (tools/scenarios/) for every tracker available here and
 * print scenario x tracker -> caught / STALE / n/a. Exits 1 when a tracker fails a scenario it
 * claims to cover (stale, error or crash), 0 otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vmtrack.h>

#include "commands.h"
#include "scenarios/scenario.h"

/* In the order "auto" prefers them; "none" only when asked for by name (it claims nothing). */
static const char *const kTrackers[] = {"kmod", "bpf", "hooks", "uffd", "pass"};
#define NTRACKERS (sizeof(kTrackers) / sizeof(kTrackers[0]))
#define MAXSEL 8

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vmtrack check [--tracker NAME]... [--scenario NAME]... [--timeout SEC]\n"
            "                     [--stress[=MS]] [--json] [--list] [--verbose]\n"
            "Runs each scenario in a forked child, on a real io_uring fixed-buffer device, for\n"
            "every tracker available here (kmod, bpf, hooks, uffd, pass; \"none\" only by name).\n"
            "--stress adds the concurrency stress (MS per tracker, default 2000) as a row.\n"
            "Exit status: 0 when no tracker failed a scenario it claims to cover, 1 otherwise,\n"
            "2 on bad usage, 3 when no tracker could be run at all.\n");
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int known_tracker(const char *t)
{
    static const char *const all[] = {"kmod", "bpf", "hooks", "uffd", "pass", "none"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (!strcmp(all[i], t))
            return 1;
    return 0;
}

struct cell {
    struct scn_outcome o;
    int ran;
    int claimed;
    int failed;
};

#define MAXSCN 64

/* What the command line asked for, and what running it found. */
struct check_run {
    const char *trackers[MAXSEL];
    size_t ntr;
    const struct scn_scenario *scs[MAXSCN];
    size_t nsc;
    unsigned timeout_s;
    int json, verbose, with_stress;
    struct cell cells[MAXSEL][MAXSCN];
    int available[MAXSEL];
    char why[MAXSEL][240];
    int failures;
};

/* One option that takes a value: 0, or 2 (bad usage) after saying why. */
static int parse_valued(struct check_run *r, const char *a, const char *val)
{
    if (!strcmp(a, "--tracker")) {
        if (!known_tracker(val)) {
            fprintf(stderr, "vmtrack check: unknown tracker '%s' (kmod, bpf, hooks, uffd, pass, none)\n",
                    val);
            return 2;
        }
        if (r->ntr == MAXSEL) {
            fprintf(stderr, "vmtrack check: too many --tracker\n");
            return 2;
        }
        r->trackers[r->ntr++] = val;
    } else if (!strcmp(a, "--scenario")) {
        const struct scn_scenario *sc = scn_find(val);
        if (!sc) {
            fprintf(stderr, "vmtrack check: unknown scenario '%s' (see --list)\n", val);
            return 2;
        }
        if (r->nsc < MAXSCN)
            r->scs[r->nsc++] = sc;
    } else {  /* --timeout */
        char *end;
        unsigned long v = strtoul(val, &end, 10);
        if (*end || v == 0 || v > 3600) {
            fprintf(stderr, "vmtrack check: --timeout wants seconds (1-3600), not '%s'\n", val);
            return 2;
        }
        r->timeout_s = (unsigned)v;
    }
    return 0;
}

/* -1: go on and run; else the exit status (0 after --list or --help, 2 on bad usage). */
static int parse_args(struct check_run *r, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tracker") || !strcmp(a, "--scenario") || !strcmp(a, "--timeout")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vmtrack check: %s needs a value\n", a);
                return 2;
            }
            if (parse_valued(r, a, argv[++i]))
                return 2;
        } else if (!strcmp(a, "--stress")) {
            r->with_stress = 1;
        } else if (!strncmp(a, "--stress=", 9)) {
            char *end;
            unsigned long v = strtoul(a + 9, &end, 10);
            if (*end || v < 100 || v > 600000) {
                fprintf(stderr, "vmtrack check: --stress=MS wants 100-600000 ms, not '%s'\n", a + 9);
                return 2;
            }
            r->with_stress = 1;
            scn_stress_scenario_ms = (unsigned)v;
        } else if (!strcmp(a, "--json")) {
            r->json = 1;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            r->verbose = 1;
        } else if (!strcmp(a, "--list")) {
            for (size_t k = 0; k < scn_scenario_count; k++)
                printf("%-20s %s\n", scn_scenarios[k].name, scn_scenarios[k].what);
            return 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "vmtrack check: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (r->ntr == 0)
        for (size_t k = 0; k < NTRACKERS; k++)
            r->trackers[r->ntr++] = kTrackers[k];
    if (r->nsc == 0)
        for (size_t k = 0; k < scn_scenario_count && k < MAXSCN - 1; k++)
            r->scs[r->nsc++] = &scn_scenarios[k];
    if (r->with_stress && r->nsc < MAXSCN)
        r->scs[r->nsc++] = &scn_stress_scenario;
    return -1;
}

/* Every scenario for tracker t; a tracker found unavailable is said why once, never passed. */
static void run_tracker(struct check_run *r, size_t t)
{
    r->available[t] = 1;
    r->why[t][0] = 0;
    for (size_t s = 0; s < r->nsc; s++) {
        struct cell *c = &r->cells[t][s];
        memset(c, 0, sizeof(*c));
        c->claimed = scn_vmtrack_claims(r->trackers[t], r->scs[s]->name);
        if (!r->available[t])
            continue;
        if (!r->json && r->verbose)
            fprintf(stderr, "vmtrack check: %s / %s ...\n", r->trackers[t], r->scs[s]->name);
        int ret = scn_run(r->scs[s], &scn_provider_vmtrack, r->trackers[t], r->timeout_s * 1000,
                          &c->o);
        if (ret < 0) {
            c->o.result = SCN_ERROR;
            snprintf(c->o.detail, sizeof(c->o.detail), "could not run: %s", strerror(-ret));
        }
        c->ran = 1;
        if (c->o.result == SCN_UNAVAILABLE) {
            r->available[t] = 0;
            snprintf(r->why[t], sizeof(r->why[t]), "%s", c->o.detail);
            c->ran = 0;
            continue;
        }
        c->failed = c->claimed && (c->o.result == SCN_STALE || c->o.result == SCN_ERROR ||
                                   c->o.result == SCN_CRASH);
        r->failures += c->failed;
    }
}

static int trackers_available(const struct check_run *r)
{
    int n = 0;
    for (size_t t = 0; t < r->ntr; t++)
        n += r->available[t];
    return n;
}

static void print_json(const struct check_run *r)
{
    printf("{\"version\": ");
    json_str(stdout, vmt_version());
    printf(", \"trackers\": [");
    for (size_t t = 0; t < r->ntr; t++) {
        printf("%s{\"name\": ", t ? ", " : "");
        json_str(stdout, r->trackers[t]);
        printf(", \"available\": %s", r->available[t] ? "true" : "false");
        if (!r->available[t]) {
            printf(", \"reason\": ");
            json_str(stdout, r->why[t]);
        }
        printf("}");
    }
    printf("], \"results\": [");
    int first = 1;
    for (size_t t = 0; t < r->ntr; t++)
        for (size_t s = 0; s < r->nsc; s++) {
            const struct cell *c = &r->cells[t][s];
            if (!c->ran)
                continue;
            printf("%s\n  {\"scenario\": ", first ? "" : ",");
            first = 0;
            json_str(stdout, r->scs[s]->name);
            printf(", \"tracker\": ");
            json_str(stdout, r->trackers[t]);
            printf(", \"result\": ");
            json_str(stdout, scn_result_name(c->o.result));
            printf(", \"claimed\": %s, \"failed\": %s, \"detail\": ",
                   c->claimed ? "true" : "false", c->failed ? "true" : "false");
            json_str(stdout, c->o.detail);
            printf("}");
        }
    printf("\n], \"failures\": %d}\n", r->failures);
}

static void print_table(const struct check_run *r)
{
    printf("%-20s", "scenario");
    for (size_t t = 0; t < r->ntr; t++)
        printf(" %-12s", r->trackers[t]);
    printf("\n");
    for (size_t s = 0; s < r->nsc; s++) {
        printf("%-20s", r->scs[s]->name);
        for (size_t t = 0; t < r->ntr; t++) {
            const struct cell *c = &r->cells[t][s];
            char buf[32];
            if (!r->available[t])
                snprintf(buf, sizeof(buf), "-");
            else if (c->o.result == SCN_STALE && !c->claimed)
                snprintf(buf, sizeof(buf), "stale (nc)");
            else
                snprintf(buf, sizeof(buf), "%s%s", scn_result_name(c->o.result),
                         c->failed ? " !!" : "");
            printf(" %-12s", buf);
        }
        printf("\n");
    }
    printf("\n");
}

/* The reasons, the notes on everything not plainly caught, the legend and the verdict. */
static void print_notes(const struct check_run *r)
{
    for (size_t t = 0; t < r->ntr; t++)
        if (!r->available[t])
            printf("%s: not available here: %s\n", r->trackers[t], r->why[t]);
    int notes = 0;
    for (size_t t = 0; t < r->ntr; t++)
        for (size_t s = 0; s < r->nsc; s++) {
            const struct cell *c = &r->cells[t][s];
            if (!c->ran || (c->o.result == SCN_CAUGHT && r->scs[s] != &scn_stress_scenario))
                continue;
            if (!notes++)
                printf("notes:\n");
            printf("  %s / %s: %s%s%s\n", r->trackers[t], r->scs[s]->name,
                   scn_result_name(c->o.result), c->o.detail[0] ? ": " : "", c->o.detail);
        }
    printf("legend: caught = new bytes reached the file; STALE = old bytes (stale registration);\n"
           "        stale (nc) = stale where the tracker does not claim to catch it; n/a = cannot\n"
           "        be set up here; !! = the tracker claims this scenario and failed it.\n");
    if (r->failures)
        printf("%d failure(s) where the tracker claims to catch the scenario\n", r->failures);
    else if (!trackers_available(r))
        printf("nothing could be measured here (see the reasons above)\n");
    else
        printf("no tracker failed a scenario it claims to catch\n");
}

int vmtrack_cmd_check(int argc, char **argv)
{
    static struct check_run r;
    memset(&r, 0, sizeof(r));
    r.timeout_s = 30;
    int rc = parse_args(&r, argc, argv);
    if (rc >= 0)
        return rc;
    for (size_t t = 0; t < r.ntr; t++)
        run_tracker(&r, t);
    if (r.json) {
        print_json(&r);
    } else {
        print_table(&r);
        print_notes(&r);
    }
    return r.failures ? 1 : trackers_available(&r) ? 0 : 3;
}
