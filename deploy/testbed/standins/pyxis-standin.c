/*
 * STAND-IN for NVIDIA Pyxis (testbed only): Pyxis is not packaged for Debian, so the testbed compiles this small
 * SPANK plugin at `up` (deploy/testbed/pyxis_standin.py) against Debian's libslurm-dev headers. Like Pyxis it
 * declares srun's --container-image; in each job step that names one, every node runs
 * /usr/lib/reconciler-testbed/pyxis-standin-start IMAGE NAME (enroot import / create / start through the enroot
 * stand-in) before the tasks start, and fails the step with the enroot error, in Pyxis' words, when the image
 * does not start. The tasks themselves then run on the node, not inside the image (there is no real image).
 * Enabled only where a plugstack.conf names it (`required /usr/lib/reconciler-testbed/pyxis-standin.so`).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(pyxis_standin, 1);

#define HELPER "/usr/lib/reconciler-testbed/pyxis-standin-start"
#define MAX_LINES 64

static char *image = NULL;

static int set_image(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    if (optarg == NULL || optarg[0] == '\0') {
        slurm_error("pyxis: --container-image: the image is empty");
        return -1;
    }
    free(image);
    image = strdup(optarg);
    return image == NULL ? -1 : 0;
}

struct spank_option spank_options[] = {
    {"container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
     "[STAND-IN of Pyxis, reconciler testbed] start this image (enroot stand-in) on each node first", 1, 0,
     set_image},
    SPANK_OPTIONS_TABLE_END
};

/* Run the helper, keep its output lines; its exit status (-1 when it could not run). */
static int run_helper(const char *name, char lines[MAX_LINES][512], int *count)
{
    int fds[2];
    pid_t pid;
    int status = 0;
    FILE *out;
    char buf[512];

    *count = 0;
    if (pipe(fds) != 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl(HELPER, HELPER, image, name, (char *)NULL);
        fprintf(stderr, "[ERROR] cannot run %s: %s\n", HELPER, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    out = fdopen(fds[0], "r");
    if (out == NULL) {
        close(fds[0]);
    } else {
        while (fgets(buf, sizeof buf, out) != NULL) {
            buf[strcspn(buf, "\n")] = '\0';
            if (*count < MAX_LINES)
                snprintf(lines[(*count)++], 512, "%s", buf);
        }
        fclose(out);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    uint32_t job = 0, step = 0;
    char name[64];
    static char lines[MAX_LINES][512];
    int count = 0, rc, i;

    (void)ac;
    (void)av;
    if (image == NULL || !spank_remote(sp))
        return 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    snprintf(name, sizeof name, "pyxis_%u.%u", job, step);
    rc = run_helper(name, lines, &count);
    if (rc == 0)
        return 0;
    slurm_error("pyxis: child failed with error code: %d", rc);
    slurm_error("pyxis: printing enroot log file:");
    for (i = 0; i < count; i++)
        slurm_error("pyxis:     %s", lines[i]);
    slurm_error("pyxis: couldn't start container");
    return -1;
}
