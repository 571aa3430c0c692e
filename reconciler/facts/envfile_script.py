"""The program a host runs to write or remove a lane's env files (how secrets reach a host).

`write PATH` reads the file's text on stdin and puts it at PATH; `remove PATH...` takes files away
(a missing one is fine). The script is a constant: PATH travels as a positional parameter, never
inside the script text.

What `write` guarantees, each against a way `cat > PATH` went wrong:

- **mode 0600, always**: the text goes to a new file created 0600 (then `fchmod` 0600, whatever the
  umask), which is renamed onto PATH; an existing file's mode (a 0644 one) is never kept, since the
  file that ends at PATH is always the new one;
- **atomic**: a reader (`docker run --env-file`) sees the old file or the whole new one, never half:
  the temporary file is written, flushed to disk (fsync) and renamed over PATH in the same directory,
  then the directory is fsynced;
- **no symlink is followed**: rename(2) replaces a symlink at PATH with the new file and leaves its
  target untouched; the temporary name (`.NAME.tmp`, fixed so a stale one left by a killed write is
  cleared) is created with O_CREAT|O_EXCL|O_NOFOLLOW, so a file or symlink already there (stale, or
  placed) is unlinked (unlink never follows) and created afresh, and a second clash is refused;
- **the directory is ours**: it is created 0700 when missing. It is refused (exit 4, nothing written)
  when it is a symlink whose owner is not this user (someone else decides where our secrets would
  go), or when what it resolves to is not a directory owned by this user, or is writable by group or
  others (another user could replace the file between our rename and the container's start). A
  symlink this user made (an operator moving the state dir to another disk) is followed. Everything
  after the check works through the directory's file descriptor, so the directory cannot be swapped
  between the check and the write.

Two writers of one PATH at once are not expected: a lane's env files are written under the host
lease. `remove` applies the same directory checks, unlinks PATH (a symlink is removed, not its
target) and any stale temporary file. Exit status: 0 done, 2 bad usage, 4 refused (a line on stderr
says why), 1 any other error. stdlib only, Python 3.8+.
"""

from __future__ import annotations

ENVFILE_REFUSED_EXIT = 4

ENVFILE_SCRIPT = r"""
import errno, os, stat, sys

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def refuse(message):
    sys.stderr.write("lanes-envfile: refused: %s\n" % message)
    sys.exit(4)


def open_dir(directory, create):
    uid = os.geteuid()
    if create:
        old = os.umask(0o077)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        finally:
            os.umask(old)
    try:
        link = os.lstat(directory)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(link.st_mode) and link.st_uid != uid:
        refuse("%s is a symlink owned by uid %d, not by this user (uid %d)" % (directory, link.st_uid, uid))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != uid:
        os.close(fd)
        refuse("%s is owned by uid %d, not by this user (uid %d)" % (directory, st.st_uid, uid))
    if st.st_mode & 0o022:
        os.close(fd)
        refuse("%s is writable by group or others (mode %04o)" % (directory, stat.S_IMODE(st.st_mode)))
    return fd


def unlink_quietly(name, dfd):
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass


def create_tmp(tmp, dfd):
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC
    for attempt in (1, 2):
        try:
            return os.open(tmp, flags, 0o600, dir_fd=dfd)
        except FileExistsError:
            if attempt == 2:
                refuse("%s keeps reappearing: another writer is at work" % tmp)
            unlink_quietly(tmp, dfd)


def write(path):
    directory, name = os.path.split(path)
    if not name or name in (".", ".."):
        sys.stderr.write("lanes-envfile: not a file path: %r\n" % path)
        sys.exit(2)
    data = sys.stdin.buffer.read()
    dfd = open_dir(directory or ".", create=True)
    tmp = "." + name + ".tmp"
    fd = create_tmp(tmp, dfd)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        mine = os.fstat(fd)
    finally:
        os.close(fd)
    there = os.lstat(tmp, dir_fd=dfd)
    if (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
        refuse("%s was replaced while it was written" % tmp)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    os.fsync(dfd)
    os.close(dfd)


def remove(paths):
    for path in paths:
        directory, name = os.path.split(path)
        if not name or name in (".", ".."):
            sys.stderr.write("lanes-envfile: not a file path: %r\n" % path)
            sys.exit(2)
        dfd = open_dir(directory or ".", create=False)
        if dfd is None:
            continue
        try:
            unlink_quietly(name, dfd)
            unlink_quietly("." + name + ".tmp", dfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)


def main(argv):
    if len(argv) == 2 and argv[0] == "write":
        write(argv[1])
    elif len(argv) >= 1 and argv[0] == "remove":
        remove(argv[1:])
    else:
        sys.stderr.write("usage: lanes-envfile write PATH < TEXT | lanes-envfile remove PATH...\n")
        sys.exit(2)


try:
    main(sys.argv[2:])
except OSError as exc:
    sys.stderr.write("lanes-envfile: %s\n" % exc)
    sys.exit(1)
"""
