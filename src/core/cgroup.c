/* Limits of the Linux cgroups this process is in (cgroup.h). */
#include "core/cgroup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PATH_CAP = 4096, DIR_CAP = 2 * PATH_CAP + 64, LINE_CAP = 8192 };

static FILE *open_at(const char *root, const char *path)
{
    char full[PATH_CAP + DIR_CAP + 64];
    const int n = snprintf(full, sizeof(full), "%s%s", root, path);
    return n > 0 && (size_t)n < sizeof(full) ? fopen(full, "re") : NULL;
}

bool es_read_first_line(const char *root, const char *path, char *buf, size_t cap)
{
    FILE *f = open_at(root, path);
    if (!f) return false;
    const bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok) buf[strcspn(buf, "\n")] = 0;
    return ok;
}

typedef struct hierarchy {
    bool found;
    char cgroup[PATH_CAP]; /* the process's cgroup in it (/proc/self/cgroup) */
    char root[PATH_CAP];   /* the part of the hierarchy its mount shows (mountinfo field 4) */
    char mount[PATH_CAP];  /* where it is mounted */
} hierarchy;

/* Whether the comma-separated list holds item. */
static bool list_has(const char *list, const char *item)
{
    const size_t n = strlen(item);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

/* mountinfo writes space, tab, newline and backslash in paths as \ooo. */
static void unescape(char *s)
{
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

/* The process's cgroup in v2 (the "0::" line) and in v1's hierarchy of the controller. */
static void read_cgroups(const char *root, const char *controller, hierarchy *v2, hierarchy *v1)
{
    FILE *f = open_at(root, "/proc/self/cgroup");
    if (!f) return;
    char line[LINE_CAP];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        *c1 = *c2 = 0;
        hierarchy *h = strcmp(line, "0") == 0 && c2 == c1 + 1 ? v2
                       : list_has(c1 + 1, controller)         ? v1
                                                              : NULL;
        if (h && strlen(c2 + 1) < sizeof(h->cgroup)) {
            strcpy(h->cgroup, c2 + 1);
            h->found = true;
        }
    }
    fclose(f);
}

/* Where each hierarchy is mounted: the first cgroup2 mount, the first cgroup mount with the
 * controller. */
static void read_mounts(const char *root, const char *controller, hierarchy *v2, hierarchy *v1)
{
    FILE *f = open_at(root, "/proc/self/mountinfo");
    if (!f) {
        v2->found = v1->found = false;
        return;
    }
    bool got2 = false, got1 = false;
    char line[LINE_CAP];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        /* id parent major:minor root mount-point options [optional...] - type source super */
        char *field[6] = {0}, *save = NULL, *tok = strtok_r(line, " ", &save);
        int n = 0;
        for (; tok && n < 6; tok = strtok_r(NULL, " ", &save))
            field[n++] = tok;
        while (tok && strcmp(tok, "-") != 0)
            tok = strtok_r(NULL, " ", &save);
        char *type = tok ? strtok_r(NULL, " ", &save) : NULL;
        char *source = type ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source ? strtok_r(NULL, " ", &save) : NULL;
        if (n < 5 || !type) continue;
        hierarchy *h =
            !got2 && strcmp(type, "cgroup2") == 0                                          ? v2
            : !got1 && strcmp(type, "cgroup") == 0 && super && list_has(super, controller) ? v1
                                                                                           : NULL;
        if (!h || strlen(field[3]) >= sizeof(h->root) || strlen(field[4]) >= sizeof(h->mount))
            continue;
        strcpy(h->root, field[3]);
        strcpy(h->mount, field[4]);
        unescape(h->root);
        unescape(h->mount);
        *(h == v2 ? &got2 : &got1) = true;
    }
    fclose(f);
    v2->found = v2->found && got2;
    v1->found = v1->found && got1;
}

/* The lowest limit from the process's cgroup up to the top of what the mount shows; 0: none. */
static double hierarchy_limit(const char *root, const hierarchy *h, es_cgroup_read_fn read)
{
    if (!h->found) return 0;
    /* the cgroup's path below the mount's root; a cgroup outside it (another cgroup namespace)
     * is the mount's top, which is then the process's own */
    const size_t rl = strlen(h->root);
    const char *rel = h->cgroup;
    if (strcmp(h->root, "/") != 0)
        rel = strncmp(h->cgroup, h->root, rl) == 0 && (h->cgroup[rl] == 0 || h->cgroup[rl] == '/')
                  ? h->cgroup + rl
                  : "";
    char dir[DIR_CAP];
    snprintf(dir, sizeof(dir), "%s%s", h->mount, strcmp(rel, "/") == 0 ? "" : rel);
    const size_t top = strlen(h->mount);
    double lowest = 0;
    for (;;) {
        const double l = read(root, dir);
        if (l > 0 && (lowest == 0 || l < lowest)) lowest = l;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash) break;
        *slash = 0;
        if (strlen(dir) < top) break;
    }
    return lowest;
}

double es_cgroup_lowest(const char *root, const char *v1_controller, es_cgroup_read_fn v2_read,
                        es_cgroup_read_fn v1_read)
{
    hierarchy *v2 = calloc(2, sizeof(*v2)), *v1 = v2 ? v2 + 1 : NULL;
    if (!v2) return 0;
    read_cgroups(root, v1_controller, v2, v1);
    read_mounts(root, v1_controller, v2, v1);
    const double l2 = hierarchy_limit(root, v2, v2_read), l1 = hierarchy_limit(root, v1, v1_read);
    free(v2);
    return l2 > 0 && (l1 == 0 || l2 < l1) ? l2 : l1;
}
