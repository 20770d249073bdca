"""The init process of a local sandbox: PID 1 of its PID namespace, running each command on request.

This file runs INSIDE the sandbox under the host's own python3 (`python3 -I -S -c <this source> FD`), so
it uses only the standard library and stays compatible with Python 3.8. It imports only modules that
load fast (marshal instead of json, _socket instead of socket, _signal instead of signal, _ctypes instead
of ctypes, no array: the pure-Python wrappers pull in enum, collections and struct, tens of milliseconds)
because its start-up is part of every episode's start. It talks to the host over the SOCK_SEQPACKET
socket FD, one marshal'd dict per packet:

    host -> init: {"op": "exec", "argv": [...], "cwd": ..., "env": {...}, "rlimits": {...}}
                  with the command's stdout and stderr pipe ends attached (SCM_RIGHTS)
    init -> host: {"op": "exited", "status": N}   (N < 0: killed by signal -N)
    host -> init: {"op": "kill"}                  (timeout: kill the command and everything it started)

After a command's main process exits, every other process in the namespace is killed, so nothing a
command starts outlives it. Being PID 1 of the namespace, this process receives no signal from inside it
unless it installed a handler (it installs none), and it marks itself non-dumpable so commands cannot
ptrace it or open its descriptors through /proc.
"""

import _ctypes
import _signal
import _socket
import marshal
import os
import resource
import select
import sys

PR_SET_DUMPABLE = 4
FD_SIZE = 4  # a C int, as SCM_RIGHTS carries descriptors
RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


def send(sock, message):
    sock.send(marshal.dumps(message, 2))


def receive(sock):
    fds = []
    data, ancdata, _flags, _addr = sock.recvmsg(1 << 20, _socket.CMSG_LEN(2 * FD_SIZE))
    for level, kind, payload in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            for at in range(0, len(payload) - FD_SIZE + 1, FD_SIZE):
                fds.append(int.from_bytes(payload[at:at + FD_SIZE], sys.byteorder, signed=True))
    if not data:
        return None, []
    return marshal.loads(data), fds


def others():
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            pids.append(int(name))
    return pids


REAPED: dict[int, int] = {}


def reap():
    """Collect every exited child (orphans re-parent to PID 1), remembering their statuses."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def kill_everything():
    for _ in range(1000):
        pids = others()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, _signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reap()
        select.select([], [], [], 0.002)


def spawn(request, out_fd, err_fd):
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        for name, value in request.get("rlimits", {}).items():
            resource.setrlimit(RLIMITS[name], (value, value))
        try:
            os.chdir(request["cwd"])
        except OSError as e:
            os.write(2, f"cannot change to directory {request['cwd']}: {e.strerror}\n".encode())
            os._exit(126)
        argv = request["argv"]
        os.execve(argv[0], argv, request["env"])
    except BaseException as e:
        try:
            os.write(2, f"sandbox: cannot run command: {e}\n".encode())
        finally:
            os._exit(127)
    os._exit(127)


def wait_for(sock, pid):
    """Wait until `pid` exits or the host asks for a kill; returns the wait status."""
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    try:
        while True:
            watch = [sock] + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watch, [], [], None if pidfd is not None else 0.01)
            if sock in ready:
                message, _ = receive(sock)
                if message is None:  # host went away
                    kill_everything()
                    os._exit(0)
                if message.get("op") == "kill":
                    kill_everything()
            reap()
            if pid in REAPED:
                return REAPED.pop(pid)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def prctl():
    """libc's prctl through the C module _ctypes (the ctypes package costs ~5 ms more to import)."""

    class CInt(_ctypes._SimpleCData):
        _type_ = "i"

    class CLong(_ctypes._SimpleCData):
        _type_ = "l"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL
        _restype_ = CInt
        _argtypes_ = (CInt, CLong, CLong, CLong, CLong)

    return Function(_ctypes.dlsym(_ctypes.dlopen(None, 2), "prctl"))  # 2: RTLD_NOW


def main():
    if prctl()(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.exit("init: prctl(PR_SET_DUMPABLE) failed")
    sock = _socket.socket(fileno=int(sys.argv[1]))
    os.set_inheritable(sock.fileno(), False)
    send(sock, {"op": "ready", "pid": os.getpid()})
    while True:
        message, fds = receive(sock)
        if message is None:
            kill_everything()
            return
        if message.get("op") != "exec" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        pid = spawn(message, fds[0], fds[1])
        for fd in fds:
            os.close(fd)
        status = wait_for(sock, pid)
        kill_everything()
        reap()
        REAPED.clear()
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        send(sock, {"op": "exited", "status": code})


if __name__ == "__main__":
    main()
