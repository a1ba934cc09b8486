// What the tests' process spawner needs of the C library beyond Swift's Glibc module. No system headers here: the
// .c file includes them, so this module's view of the C library cannot clash with Glibc's.
#ifndef LIVEAUDIO_CTESTSPAWN_H
#define LIVEAUDIO_CTESTSPAWN_H

/// Adds "close every descriptor from `from` up" to the spawn file actions at `actions` (a
/// posix_spawn_file_actions_t *): a server started while other threads hold pipes open inherits none of them.
/// Returns 0 or an error number.
int la_spawn_close_from(void *actions, int from);

/// Makes a pipe whose two ends close on exec (`ends[0]` to read, `ends[1]` to write), in one step, so that no child
/// another thread spawns meanwhile inherits them. Returns 0, or -1 with errno set.
int la_pipe_cloexec(int ends[2]);

#endif
