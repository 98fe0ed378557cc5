"""The job secret of a ParameterServerStrategy job, and the frame key derived from it.

Every frame a task, the coordinator or a C++ data endpoint sends is authenticated with a key
derived from one secret that the chief and every task of the job share (docs/parameter_server.md,
"Security"). `MDTRAIN_JOB_SECRET` holds the secret itself, or the absolute path of a file holding
it (mode 0600, owned by the user running the task): a file keeps the secret out of `ps` output
and /proc/<pid>/environ of other processes. `python -m mdtrain.launch --ps/--workers` makes one
file per job (`make_secret_file`); users of `tf.distribute.Server` / TF_CONFIG clusters set it
themselves. A task without a secret refuses to start unless `MDTRAIN_INSECURE_PS=1` says, on
purpose, that the network is trusted.
"""
import hashlib
import hmac
import logging
import os
import secrets
import stat
import tempfile

ENV = "MDTRAIN_JOB_SECRET"
INSECURE_ENV = "MDTRAIN_INSECURE_PS"

MIN_SECRET_CHARS = 16
# A secret file holds a line of text; anything far longer is not a secret file (a wrong path).
_MAX_SECRET_FILE_BYTES = 4096
# Domain separation: the frame key is not the secret itself, so the secret could key other things.
_KEY_CONTEXT = b"mdtrain job key v1"

_log = logging.getLogger("mdtrain")
_warned_insecure = False


def make_secret_file():
    """A new random secret in a new file of mode 0600 inside a new directory of mode 0700; its path."""
    directory = tempfile.mkdtemp(prefix="mdtrain-job-")  # mode 0700, a name no one else can take
    path = os.path.join(directory, "secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (secrets.token_hex(32) + "\n").encode("ascii"))
    finally:
        os.close(fd)
    return path


def remove_secret_file(path):
    """Removes a file made by make_secret_file and its directory (an emptied directory only:
    nothing else is deleted)."""
    for remove, target in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(target)
        except FileNotFoundError:
            pass


def _read_secret_file(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise ValueError(f"{ENV}: cannot read the job secret file {path}: {e.strerror}") from None
    try:
        info = os.fstat(fd)  # of the file opened, whatever a symlink on the way pointed to
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{ENV}: the job secret file {path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise ValueError(f"{ENV}: the job secret file {path} is owned by uid {info.st_uid}, not by this user "
                             f"(uid {os.geteuid()}): another user could have written it")
        if info.st_mode & 0o077:
            raise ValueError(f"{ENV}: the job secret file {path} has mode {stat.S_IMODE(info.st_mode):04o}: other "
                             f"users can read or write it; make it private with chmod 600 {path}")
        data = os.read(fd, _MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_SECRET_FILE_BYTES:
        raise ValueError(f"{ENV}: the job secret file {path} is over {_MAX_SECRET_FILE_BYTES} bytes: not a secret "
                         "file")
    secret = data.strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise ValueError(f"{ENV}: the job secret in {path} has {len(secret)} characters; it needs at least "
                         f"{MIN_SECRET_CHARS} (python -c 'import secrets; print(secrets.token_hex(32))')")
    return secret


def job_key(environ=None):
    """The 32-byte frame key of this job (HMAC-SHA256 of the secret), or None when the job runs
    unauthenticated on purpose (MDTRAIN_INSECURE_PS=1 and no secret). Raises naming the variable
    (or the file) when the secret is missing, too short or unsafely stored."""
    global _warned_insecure
    env = os.environ if environ is None else environ
    value = env.get(ENV, "")
    insecure = env.get(INSECURE_ENV, "")
    if insecure not in ("", "0", "1"):
        raise ValueError(f"{INSECURE_ENV} must be 1 (run without authentication) or 0, got {insecure!r}")
    if value:
        if value.startswith(os.sep):  # an absolute path: the secret is in that file
            secret = _read_secret_file(value)
        else:
            secret = value.strip().encode("utf-8")
            if len(secret) < MIN_SECRET_CHARS:
                raise ValueError(f"{ENV}: the job secret has {len(secret)} characters; it needs at least "
                                 f"{MIN_SECRET_CHARS} (python -c 'import secrets; print(secrets.token_hex(32))')")
        return hmac.new(secret, _KEY_CONTEXT, hashlib.sha256).digest()
    if insecure == "1":
        if not _warned_insecure:
            _warned_insecure = True
            _log.warning("ParameterServerStrategy: %s=1: this job is UNAUTHENTICATED: any process that can reach "
                         "its ports can run code in its tasks and read or change its variables. Use it only on "
                         "a network you trust; set %s to authenticate the job", INSECURE_ENV, ENV)
        return None
    raise RuntimeError(f"ParameterServerStrategy: no job secret: set {ENV} to the same secret (at least "
                       f"{MIN_SECRET_CHARS} characters, or the absolute path of a file of mode 0600 holding it) on "
                       f"every task and on the chief, or {INSECURE_ENV}=1 to run unauthenticated on a network you "
                       "trust; `python -m mdtrain.launch --ps P --workers W` makes one per job")
