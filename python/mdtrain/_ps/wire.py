"""The control plane's messages: Python objects pickled with cloudpickle over ZeroMQ sockets.

Closures and dataset functions travel by value (cloudpickle), as TF serializes the functions it
ships to its workers; anything that can run code must only listen on a trusted network. A model
compiled under a ParameterServerStrategy travels as a reference: each worker
builds and compiles its own copy once and keeps it, so a closure that uses the chief's model
trains the worker's copy, whose steps pull from and push to the parameter servers. Creators of
such state are sent to a worker once (per worker incarnation), not with every closure.
"""
import io
import pickle
import socket
import threading

import cloudpickle
import zmq


def context():
    return zmq.Context.instance()


def tcp_address(address, bind=False):
    """'host:port' -> a ZeroMQ endpoint; to bind, the host is resolved to the interface's address."""
    host, port = address.rsplit(":", 1)
    if bind:
        host = socket.gethostbyname(host)
    return f"tcp://{host}:{port}"


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
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def loads(data):
    return pickle.loads(data)


def creator_for_target(resource_id, creator):
    """The creator's bytes when the target worker has not been sent them yet, else None."""
    if target.sent is not None and resource_id in target.sent:
        return None
    data = dumps(creator)
    if target.sent is not None:
        target.sent.add(resource_id)
    return data


def send(sock, obj, identity=None):
    frames = [dumps(obj)] if identity is None else [identity, dumps(obj)]
    sock.send_multipart(frames, copy=False)


def receive(sock, with_identity=False):
    frames = sock.recv_multipart()
    if with_identity:
        return frames[0], loads(frames[-1])
    return loads(frames[-1])


def new_socket(kind, linger=0):
    sock = context().socket(kind)
    sock.setsockopt(zmq.LINGER, linger)
    return sock
