#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>
#include "CTestSpawn.h"

int la_spawn_close_from(void *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, from);
}

int la_pipe_cloexec(int ends[2]) {
    return pipe2(ends, O_CLOEXEC);
}
