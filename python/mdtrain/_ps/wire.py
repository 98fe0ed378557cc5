"""The control plane's messages: authenticated frames over ZeroMQ, JSON bodies, pickles only for code.

Frames. Every message is one ZeroMQ frame (after the ROUTER's identity)

    tag[32] | session[16] | counter[8, little-endian uint64] | body
    tag = HMAC-SHA256(job key, b"mdtrain-frame-v1" + direction + session + counter + body)

with the key of job_secret.job_key(), direction b"Q" for requests (the DEALERs of the chief and
its coordinator to a task's ROUTER) and b"R" for replies, a random session per sending socket and
a counter from 1. The receiver checks the tag (hmac.compare_digest) before it looks at anything in
the body, then that the counter is above the last one it accepted from that session (a bounded
window of sessions), so forged, altered, reflected (a reply sent back as a request) and replayed
frames are dropped: counted, logged once per peer, never decoded. The C++ data endpoint
(ParameterShardServer / ParameterServerClient) signs its frames the same way
(`_core.frame_sign`, tested byte for byte against `frame_sign` here). With MDTRAIN_INSECURE_PS=1
and no secret, frames are the body alone.

Bodies. `u32 header length | JSON header | blobs`: the header is {"m": message, "b": [blob
lengths]}; a message is a tuple of JSON values, with tuples, bytes and NumPy arrays (numeric
dtypes, shape and dtype checked against the blob's length on decode) referenced from the JSON.
Nothing in a body is a pickle to the decoder: the fields that carry code (a closure and the
per-worker creators inside it, a closure's result or exception) are pickled bytes that only the
callers' explicit `loads()` unpickle, after the frame was authenticated.

Closures and dataset functions travel by value (cloudpickle), as TF serializes the functions it
ships to its workers. A model compiled under a ParameterServerStrategy travels as a reference:
each worker builds and compiles its own copy once and keeps it, so a closure that uses the chief's
model trains the worker's copy, whose steps pull from and push to the parameter servers. Creators
of such state are sent to a worker once (per worker incarnation), not with every closure.
"""
import collections
import hashlib
import hmac
import io
import json
import logging
import os
import pickle
import socket
import struct
import threading
import time

import cloudpickle
import numpy as np
import zmq

from mdtrain._ps import job_secret

_log = logging.getLogger("mdtrain")

FRAME_CONTEXT = b"mdtrain-frame-v1"
REQUEST, REPLY = b"Q", b"R"
TAG_BYTES, SESSION_BYTES, COUNTER_BYTES = 32, 16, 8
HEADER_BYTES = TAG_BYTES + SESSION_BYTES + COUNTER_BYTES  # 56

# Sessions whose last counter a receiving socket remembers (least recently used forgotten first).
# Only authenticated frames make an entry, so a stranger cannot flush the window.
REPLAY_WINDOW_SESSIONS = 4096

# The largest message a listening socket takes (ZMQ_MAXMSGSIZE; ZeroMQ disconnects a peer sending
# more): a stranger cannot make a task allocate without bound. The largest legitimate messages are
# closures carrying a per-worker copy of fit's arrays (sent once per worker); senders refuse a
# message over the bound with an error naming it.
MAX_MESSAGE_ENV = "MDTRAIN_PS_MAX_MESSAGE_BYTES"
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30

_MAX_ARRAY_DIMS = 32
_ENVELOPE_ROOM = 1 << 16  # a pickled field's message: the frame header and the JSON around it
_REJECT_LOG_SECONDS = 60.0
_REJECT_LOG_PEERS = 1024


def max_message_bytes(environ=None):
    env = os.environ if environ is None else environ
    text = env.get(MAX_MESSAGE_ENV)
    if text is None:
        return DEFAULT_MAX_MESSAGE_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not (1 << 16) <= value <= (1 << 40):
        raise ValueError(f"{MAX_MESSAGE_ENV} must be an integer number of bytes in [65536, 2**40], got {text!r}")
    return value


def context():
    return zmq.Context.instance()


def tcp_address(address, bind=False):
    """'host:port' -> a ZeroMQ endpoint; to bind, the host is resolved to the interface's address."""
    host, port = address.rsplit(":", 1)
    if bind:
        host = socket.gethostbyname(host)
    return f"tcp://{host}:{port}"


# ---- pickles: only for what carries code ------------------------------------------------------
class _Target(threading.local):
    """The worker a closure is being pickled for, and the resources it already holds."""

    sent = None  # set of resource ids this incarnation of the worker was sent


target = _Target()


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj):
        # Objects standing for per-worker state (a per-worker dataset, a model compiled under the
        # strategy) say how a worker finds or makes its own copy.
        reduce = getattr(obj, "_ps_reduce", None)
        if reduce is not None and not isinstance(obj, type):
            return reduce()
        return super().reducer_override(obj)


def dumps(obj):
    """Pickles what carries code (a closure, a result); refuses what no task would take."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    limit = max_message_bytes()
    if buffer.tell() > limit - _ENVELOPE_ROOM:
        raise ValueError(f"wire: {type(obj).__name__} pickles to {buffer.tell()} bytes, over the {limit} bytes a task "
                         f"takes in one message ({MAX_MESSAGE_ENV}; set it on the chief and every task)")
    return buffer.getvalue()


def loads(data):
    """Unpickles a field that carries code. Callers use it only on fields of authenticated frames."""
    return pickle.loads(data)


def creator_for_target(resource_id, creator):
    """The creator's bytes when the target worker has not been sent them yet, else None."""
    if target.sent is not None and resource_id in target.sent:
        return None
    data = dumps(creator)
    if target.sent is not None:
        target.sent.add(resource_id)
    return data


# ---- bodies: JSON with blobs ------------------------------------------------------------------
class MalformedBody(ValueError):
    """An authenticated body that is not a message of this protocol."""


_SPECIAL = ("$t", "$b", "$a")


def _encode_value(value, blobs):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return value.item()
    if isinstance(value, tuple):
        return {"$t": [_encode_value(v, blobs) for v in value]}
    if isinstance(value, list):
        return [_encode_value(v, blobs) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k.startswith("$"):
                raise TypeError(f"wire: a message's dict keys must be strings not starting with '$', got {k!r}")
            out[k] = _encode_value(v, blobs)
        return out
    if isinstance(value, (bytes, bytearray, memoryview)):
        blobs.append(bytes(value) if isinstance(value, memoryview) else value)
        return {"$b": len(blobs) - 1}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise TypeError(f"wire: only numeric arrays travel in messages, got dtype {value.dtype}")
        array = value if value.flags.c_contiguous else value.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        blobs.append(array.reshape(-1).view(np.uint8))  # the array's bytes, not a copy
        return {"$a": len(blobs) - 1, "dtype": array.dtype.str, "shape": list(array.shape)}
    raise TypeError(f"wire: a message cannot carry {type(value).__name__} (pickle it with wire.dumps if it is code)")


def encode(message):
    """A message (a tuple) -> the parts of its body, to be joined (one copy, when signed)."""
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise TypeError(f"wire: a message is a tuple starting with its kind, got {message!r:.80}")
    blobs = []
    header = json.dumps({"m": _encode_value(message, blobs), "b": [memoryview(b).nbytes for b in blobs]},
                        separators=(",", ":")).encode("utf-8")
    return [struct.pack("<I", len(header)), header, *blobs]


def _decode_array(spec, blob):
    if set(spec) != {"$a", "dtype", "shape"} or not isinstance(spec["dtype"], str):
        raise MalformedBody(f"bad array reference {spec!r:.80}")
    try:
        dtype = np.dtype(spec["dtype"])
    except (TypeError, ValueError, SyntaxError):
        raise MalformedBody(f"bad array dtype {spec['dtype']!r:.40}") from None
    if dtype.kind not in "biufc" or dtype.hasobject or dtype.itemsize == 0:
        raise MalformedBody(f"array dtype {dtype} is not numeric")
    shape = spec["shape"]
    if (not isinstance(shape, list) or len(shape) > _MAX_ARRAY_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise MalformedBody(f"bad array shape {shape!r:.80}")
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize != len(blob):
        raise MalformedBody(f"array of shape {tuple(shape)} and dtype {dtype} needs {count * dtype.itemsize} "
                            f"bytes, its blob has {len(blob)}")
    return np.frombuffer(blob, dtype=dtype).reshape(tuple(shape)).copy()


def _decode_value(value, blobs):
    if isinstance(value, list):
        return [_decode_value(v, blobs) for v in value]
    if not isinstance(value, dict):
        return value
    special = [k for k in value if k.startswith("$")]
    if not special:
        return {k: _decode_value(v, blobs) for k, v in value.items()}
    kind = special[0]
    if kind not in _SPECIAL or len(special) != 1:
        raise MalformedBody(f"unknown reference {special!r:.80}")
    if kind == "$t":
        if len(value) != 1 or not isinstance(value["$t"], list):
            raise MalformedBody("bad tuple")
        return tuple(_decode_value(v, blobs) for v in value["$t"])
    index = value[kind]
    if type(index) is not int or not 0 <= index < len(blobs):
        raise MalformedBody(f"blob reference {index!r:.20} out of range")
    if kind == "$b":
        if len(value) != 1:
            raise MalformedBody("bad bytes reference")
        return bytes(blobs[index])
    return _decode_array(value, blobs[index])


def decode(body):
    """A body -> its message (a tuple starting with a str); MalformedBody if it is not one, whatever
    the bytes (a frame's sender may hold the key and still send garbage)."""
    try:
        return _decode(body)
    except MalformedBody:
        raise
    except Exception as e:  # noqa: B902 - any other failure of a check is the body's fault too
        raise MalformedBody(f"{type(e).__name__}: {e}"[:200]) from None


def _decode(body):
    view = memoryview(body)
    if len(view) < 4:
        raise MalformedBody(f"body of {len(view)} bytes")
    (header_len,) = struct.unpack_from("<I", view, 0)
    if header_len > len(view) - 4:
        raise MalformedBody(f"header of {header_len} bytes in a body of {len(view)}")
    try:
        header = json.loads(bytes(view[4:4 + header_len]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise MalformedBody(f"header is not JSON: {type(e).__name__}") from None
    if not isinstance(header, dict) or set(header) != {"m", "b"} or not isinstance(header["b"], list):
        raise MalformedBody("header is not {m, b}")
    lengths = header["b"]
    if not all(type(n) is int and n >= 0 for n in lengths) or 4 + header_len + sum(lengths) != len(view):
        raise MalformedBody(f"blob lengths do not add up to the body's {len(view)} bytes")
    blobs, at = [], 4 + header_len
    for n in lengths:
        blobs.append(view[at:at + n])
        at += n
    try:
        message = _decode_value(header["m"], blobs)
    except RecursionError:
        raise MalformedBody("message nested too deeply") from None
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise MalformedBody("message is not a tuple starting with its kind")
    return message


# ---- frames: authentication -------------------------------------------------------------------
def _tag(key, direction, session, counter_bytes, parts):
    mac = hmac.new(key, FRAME_CONTEXT + direction + session + counter_bytes, hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def frame_sign(key, direction, session, counter, body):
    """tag | session | counter | body (the C++ data endpoint's `_core.frame_sign` gives the same bytes)."""
    if len(key) != 32 or direction not in (REQUEST, REPLY) or len(session) != SESSION_BYTES:
        raise ValueError("frame_sign: key of 32 bytes, direction b'Q' or b'R', session of 16 bytes")
    counter_bytes = struct.pack("<Q", counter)
    return _tag(key, direction, session, counter_bytes, [body]) + session + counter_bytes + bytes(body)


class _ReplayWindow:
    """The last counter accepted from each of the most recently seen sessions."""

    def __init__(self, sessions=REPLAY_WINDOW_SESSIONS):
        self._last = collections.OrderedDict()
        self._sessions = sessions

    def accept(self, session, counter):
        last = self._last.get(session)
        if last is not None and counter <= last:
            return False
        self._last[session] = counter
        self._last.move_to_end(session)
        if len(self._last) > self._sessions:
            self._last.popitem(last=False)
        return True


class _RejectLog:
    """Logs rejected frames once per peer and minute, with how many were dropped meanwhile."""

    def __init__(self):
        self._peers = collections.OrderedDict()  # peer -> [last logged, dropped since]

    def note(self, peer, reason, counts):
        now = time.monotonic()
        entry = self._peers.get(peer)
        if entry is not None and now - entry[0] < _REJECT_LOG_SECONDS:
            entry[1] += 1
            return
        since = entry[1] if entry is not None else 0
        self._peers[peer] = [now, 0]
        self._peers.move_to_end(peer)
        if len(self._peers) > _REJECT_LOG_PEERS:
            self._peers.popitem(last=False)
        _log.warning("mdtrain ps: dropped a frame from %s: %s (%d more from it since the last report; dropped in "
                     "all: %s)", peer, reason, since, dict(counts))


class FramedSocket(zmq.Socket):
    """A ZeroMQ socket whose messages (wire.send / wire.receive) are signed and checked with the job key."""

    # pyzmq maps unknown attribute names to socket options; these are declared, so they are plain.
    _mdtrain_key = None
    _mdtrain_session = None
    _mdtrain_counter = 0
    _mdtrain_window = None
    _mdtrain_rejected = None
    _mdtrain_log = None
    _mdtrain_max_bytes = None
    _mdtrain_peer = None

    @property
    def last_peer(self):
        """The address of the peer of the last message received (for logs)."""
        return self._mdtrain_peer

    @property
    def rejected(self):
        """Frames dropped so far, by reason."""
        return dict(self._mdtrain_rejected)

    def _setup(self, key, max_bytes):
        self._mdtrain_key = key
        self._mdtrain_session = os.urandom(SESSION_BYTES)
        self._mdtrain_counter = 0
        self._mdtrain_window = _ReplayWindow()
        self._mdtrain_rejected = collections.Counter()
        self._mdtrain_log = _RejectLog()
        self._mdtrain_max_bytes = max_bytes

    @property
    def _directions(self):
        """(sent, expected): a ROUTER answers requests, the others (DEALERs) make them."""
        return (REPLY, REQUEST) if self.type == zmq.ROUTER else (REQUEST, REPLY)

    def reject(self, reason, peer=None):
        """Counts (by the reason's first word, before a colon) and logs a dropped message."""
        self._reject(reason, self._mdtrain_peer if peer is None else peer)

    def _reject(self, reason, peer):
        self._mdtrain_rejected[reason.split(":")[0]] += 1
        self._mdtrain_log.note(peer, reason, self._mdtrain_rejected)


_NO_KEY = object()
_keys = {}  # (MDTRAIN_JOB_SECRET, MDTRAIN_INSECURE_PS) -> the key read for them
_keys_lock = threading.Lock()


def _job_key():
    """job_secret.job_key(), read once per setting of the variables: sockets made late (a
    coordinator reconnecting while the job ends) do not depend on the secret file still being there."""
    setting = (os.environ.get(job_secret.ENV), os.environ.get(job_secret.INSECURE_ENV))
    with _keys_lock:
        if setting not in _keys:
            _keys[setting] = job_secret.job_key()
        return _keys[setting]


def new_socket(kind, linger=0, key=_NO_KEY):
    """A FramedSocket of `kind`. key: the job key (default job_secret.job_key(), which raises when
    the job has no secret and no MDTRAIN_INSECURE_PS=1 opt-out). A ROUTER (a task's listening
    socket) takes messages up to max_message_bytes()."""
    if key is _NO_KEY:
        key = _job_key()
    max_bytes = max_message_bytes()
    sock = FramedSocket(context(), kind)
    sock.setsockopt(zmq.LINGER, linger)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)
    sock._setup(key, max_bytes)
    return sock


def send_body(sock, parts, identity=None):
    """Sends an encoded body (encode()'s parts), signed with the socket's key."""
    size = HEADER_BYTES + sum(memoryview(p).nbytes for p in parts)
    if size > sock._mdtrain_max_bytes:
        raise ValueError(f"wire: a message of {size} bytes is over the {sock._mdtrain_max_bytes} bytes a task takes "
                         f"({MAX_MESSAGE_ENV}; set it on the chief and every task)")
    if sock._mdtrain_key is not None:
        sent, _ = sock._directions
        sock._mdtrain_counter += 1
        counter_bytes = struct.pack("<Q", sock._mdtrain_counter)
        tag = _tag(sock._mdtrain_key, sent, sock._mdtrain_session, counter_bytes, parts)
        parts = [tag, sock._mdtrain_session, counter_bytes, *parts]
    frame = b"".join(parts)
    sock.send_multipart([frame] if identity is None else [identity, frame], copy=False)


def send(sock, message, identity=None):
    send_body(sock, encode(message), identity)


def _peer(frame):
    try:
        return frame.get("Peer-Address")
    except (zmq.ZMQError, AttributeError, KeyError):
        return "an unknown peer"


def receive(sock, with_identity=False):
    """The next message on the socket ((identity, message) on a ROUTER with with_identity), or None
    when the frame was rejected: wrong shape, bad tag, replayed, or a body that is not a message.
    A rejected frame is counted (sock.rejected) and logged once per peer and minute; nothing in it
    was decoded before its tag was checked."""
    parts = [sock.recv(copy=False)]
    extra = 0
    while sock.getsockopt(zmq.RCVMORE):
        frame = sock.recv(copy=False)
        if len(parts) < 2:
            parts.append(frame)
        else:
            extra += 1  # drained, not kept
    expected = 2 if sock.type == zmq.ROUTER else 1
    peer = sock._mdtrain_peer = _peer(parts[-1])
    if extra or len(parts) != expected:
        sock._reject(f"parts: a message of {len(parts) + extra} frames, not {expected}", peer)
        return None
    identity, data = (parts[0].bytes, parts[1].buffer) if expected == 2 else (None, parts[0].buffer)
    key = sock._mdtrain_key
    if key is not None:
        if len(data) < HEADER_BYTES:
            sock._reject(f"short: a frame of {len(data)} bytes, under the {HEADER_BYTES}-byte header", peer)
            return None
        _, expected_direction = sock._directions
        tag, session, counter_bytes = bytes(data[:32]), bytes(data[32:48]), bytes(data[48:56])
        body = data[HEADER_BYTES:]
        if not hmac.compare_digest(tag, _tag(key, expected_direction, session, counter_bytes, [body])):
            sock._reject("tag: not signed with this job's key (a stranger, another job, or a wrong secret)", peer)
            return None
        (counter,) = struct.unpack("<Q", counter_bytes)
        if not sock._mdtrain_window.accept(session, counter):
            sock._reject(f"replay: counter {counter} of session {session.hex()[:8]} was seen", peer)
            return None
        data = body
    try:
        message = decode(data)
    except MalformedBody as e:
        sock._reject(f"malformed: {e}", peer)
        return None
    return (identity, message) if with_identity else message
