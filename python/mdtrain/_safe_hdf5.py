"""Reading HDF5 files no one here wrote: nothing from outside the file, nothing larger than asked.

h5py's high-level API follows what a file declares: soft links, external links (which open another
HDF5 file), external storage (a dataset whose raw bytes live in any other file: a crafted weights
file reads /etc/shadow as a float kernel) and virtual datasets (which map other files' datasets).
Every mdtrain reader of HDF5 (load_weights, the weights inside a .keras archive,
tf.train.Checkpoint.restore) goes through this module instead, which walks the tree link by link,
descends only hard links and refuses, with a ValueError naming the file and the object's path,
- soft, external and user-defined links,
- datasets with external storage, virtual datasets and filters other than deflate, shuffle and
  fletcher32 (Keras and mdtrain never compress; any other filter would load a plugin),
- a dataset whose dtype is not a plain number or whose shape is not the one the caller expects,
  checked on the metadata before a byte of data is read (a 19 KB file can declare a 4 GB
  dataset: HDF5 reads past the end of a file as zeros), and a deflated chunk that inflates
  beyond its declared size (HDF5's own inflate grows its buffer until the stream ends),
- a local heap (an old-style group's link names) whose free list runs in a cycle, checked on the
  file's bytes before HDF5 opens it: HDF5 allocates a node per free-list entry without looking
  for repeats, so a 19 KB file makes it allocate until memory runs out.
Keras 3.15 refuses external storage and external links the same way.
"""
import mmap
import os
import zlib

import numpy as np

_DEFLATE, _SHUFFLE, _FLETCHER32 = 1, 2, 3
_FILTERS = {_DEFLATE: "deflate", _SHUFFLE: "shuffle", _FLETCHER32: "fletcher32"}
MAX_ATTRIBUTE_BYTES = 1 << 20  # the attributes mdtrain reads are names and short JSON lists


def h5py():
    try:
        import h5py as module
    except ImportError:  # a dependency of mdtrain; missing only in a broken install
        raise ImportError("Keras weight files need h5py: pip install h5py") from None
    return module


class File:
    """An HDF5 file opened for reading; `root` is its "/" group. Use as a context manager. Errors
    say "<where>: <display>: <object> <why>" (display: the path, or the name of an archive's member
    the file was extracted from)."""

    def __init__(self, path, where, display=None):
        self.path, self.where = str(display if display is not None else path), where
        _refuse_cyclic_heap_free_lists(path, self)
        try:
            self._file = h5py().File(str(path), "r")
        except (OSError, ValueError) as e:
            raise ValueError(f"{where}: {self.path} is not a readable HDF5 file ({e})") from None
        self.root = Group(self, self._file, "/")

    def fail(self, object_path, why):
        raise ValueError(f"{self.where}: {self.path}: {object_path} {why}")

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_FREE_NULL = 1  # the end of a local heap's free list


def _refuse_cyclic_heap_free_lists(path, file):
    """Walks the free list of every local heap ("HEAP" prefix, version 0) in the file's bytes, as
    HDF5 would (H5HL__fl_deserialize), and refuses one that comes back to an offset it has seen.
    A walk that leaves the heap stops here: HDF5 refuses that list itself. Bytes of a dataset
    that happen to look like a heap prefix are walked too; only a cycle of in-heap offsets, which
    no data plausibly holds, is refused."""
    try:
        f = open(path, "rb")
    except OSError:  # h5py's open says why
        return
    with f:
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # empty, or not a regular file: h5py's open says why
            return
        with data:
            _walk_local_heaps(data, file)


def _walk_local_heaps(data, file):
    base = next((at for at in [0] + [512 << k for k in range(20)] if data[at:at + 8] == _SIGNATURE), None)
    if base is None:
        return

    def number(at, size):  # slices: a truncated file reads as short numbers, never out of range
        return int.from_bytes(data[at:at + size], "little")

    sizes = (13, 14) if number(base + 8, 1) < 2 else (9, 10)  # superblock versions 0-1, 2-3
    offsets, lengths = (number(base + k, 1) for k in sizes)
    if offsets not in (2, 4, 8) or lengths not in (2, 4, 8):
        return  # HDF5 refuses such a superblock itself

    at = data.find(b"HEAP")
    while at >= 0:
        if data[at + 4:at + 8] == b"\0\0\0\0":  # version 0, reserved bytes zero
            size = number(at + 8, lengths)
            free = number(at + 8 + lengths, lengths)
            segment = base + number(at + 8 + 2 * lengths, offsets)
            seen = set()
            while free != _FREE_NULL and free + 2 * lengths <= size and segment + free + 2 * lengths <= len(data):
                if free in seen:
                    file.fail(f"local heap at byte {at}", f"has a free list that runs in a cycle (offset {free} "
                                                          "again); not a well-formed HDF5 file")
                seen.add(free)
                free = number(segment + free, lengths)
        at = data.find(b"HEAP", at + 4)


class _Object:
    def __init__(self, file, obj, path):
        self.file, self._obj, self.path = file, obj, path

    def attr(self, name, max_bytes=MAX_ATTRIBUTE_BYTES):
        """The attribute's value (bytes decoded to str), None when absent; a large one is refused
        before it is read."""
        try:
            if name not in self._obj.attrs:
                return None
            aid = self._obj.attrs.get_id(name)
            size = int(aid.get_storage_size())
            dtype = aid.dtype
            if size > max_bytes or dtype.kind not in "biufSOU":
                self.file.fail(self.path, f"has an attribute {name!r} of {size} bytes, dtype {dtype}: not a "
                                          "name, number or short text")
            value = self._obj.attrs[name]
        except (OSError, KeyError, TypeError, RuntimeError) as e:
            self.file.fail(self.path, f"has an unreadable attribute {name!r} ({e})")
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str) and len(value) > max_bytes:
            self.file.fail(self.path, f"attribute {name!r} holds {len(value)} characters, more than {max_bytes}")
        return value


class Group(_Object):
    def _child_path(self, name):
        return ("" if self.path == "/" else self.path) + "/" + name

    def keys(self):
        """The names of the links in the group (reading names follows nothing)."""
        try:
            return [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in self._obj.keys()]
        except (OSError, RuntimeError, KeyError) as e:
            self.file.fail(self.path, f"cannot be listed ({e})")

    def __len__(self):
        return len(self.keys())

    def get(self, name):
        """The Group or Dataset under a hard link `name`, None when there is no such link; a soft,
        external or user-defined link is a ValueError (never followed)."""
        path = self._child_path(name)
        mod = h5py()
        try:
            link = self._obj.get(name, getlink=True)
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as e:
            self.file.fail(path, f"cannot be read ({e})")
        if link is None:
            return None
        if isinstance(link, mod.ExternalLink):
            self.file.fail(path, f"is an external link to {link.filename}:{link.path}; mdtrain reads nothing "
                                 "outside the file")
        if isinstance(link, mod.SoftLink):
            self.file.fail(path, f"is a soft link to {link.path}; weight files hold their objects directly")
        if not isinstance(link, mod.HardLink):
            self.file.fail(path, f"is a {type(link).__name__}; only hard links are read")
        try:
            obj = self._obj.get(name)
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as e:
            self.file.fail(path, f"cannot be read ({e})")
        if isinstance(obj, mod.Group):
            return Group(self.file, obj, path)
        if isinstance(obj, mod.Dataset):
            return Dataset(self.file, obj, path)
        self.file.fail(path, f"is a {type(obj).__name__}, neither a group nor a dataset")

    def group(self, name):
        """The subgroup `name` (slash-separated path allowed), None when absent."""
        node = self
        for part in name.split("/"):
            node = node.get(part) if node is not None else None
            if node is not None and not isinstance(node, Group):
                self.file.fail(node.path, "is a dataset where a group is expected")
        return node

    def __contains__(self, name):
        return self.get(name) is not None

    def read(self, name, shape=None, max_bytes=None, kinds="biuf"):
        """The dataset `name` as a NumPy array, checked by Dataset.read; a missing one is an error."""
        node = self.get(name)
        if node is None:
            self.file.fail(self._child_path(name), "is missing")
        if not isinstance(node, Dataset):
            self.file.fail(node.path, "is a group where a dataset is expected")
        return node.read(shape=shape, max_bytes=max_bytes, kinds=kinds)


class Dataset(_Object):
    @property
    def shape(self):
        return self._obj.shape

    def read(self, shape=None, max_bytes=None, kinds="biuf"):
        """The data, after checking on the metadata alone: stored in this file, plain numbers of
        dtype kind in `kinds`, exactly `shape` (when given) and at most `max_bytes` (when given)."""
        if shape is None and max_bytes is None:
            raise TypeError("Dataset.read needs the expected shape or a byte bound")
        dset, fail = self._obj, lambda why: self.file.fail(f"dataset {self.path}", why)
        try:
            dcpl = dset.id.get_create_plist()
            external = dcpl.get_external_count()
            virtual = dset.is_virtual
            filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
            dtype, found, chunks = dset.dtype, dset.shape, dset.chunks
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            fail(f"cannot be read ({e})")
        if external > 0:
            fail(f"keeps its data in {external} external file(s); mdtrain reads nothing outside the file")
        if virtual:
            fail("is a virtual dataset (mapping other datasets or files); mdtrain reads nothing outside the file")
        unknown = [f for f in filters if f not in _FILTERS]
        if unknown:
            fail(f"uses HDF5 filter(s) {unknown}; mdtrain reads only {sorted(_FILTERS.values())}")
        if dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None or dtype.itemsize > 8:
            expected = "numbers" if kinds == "biuf" else f"dtype kind {kinds!r}"
            fail(f"holds dtype {dtype}, expected {expected}" + (f" of shape {tuple(shape)}" if shape is not None
                                                                else ""))
        if found is None:
            fail("has no dataspace (a null dataset)")
        if shape is not None and tuple(found) != tuple(shape):
            fail(f"has shape {tuple(found)}, expected {tuple(shape)} (dtype {dtype})")
        nbytes = int(np.prod(found, dtype=object)) * dtype.itemsize
        if max_bytes is not None and nbytes > max_bytes:
            fail(f"declares {nbytes} bytes (shape {tuple(found)}, dtype {dtype}), more than the {max_bytes} the "
                 "model can hold")
        if chunks is not None:
            self._check_chunks(chunks, dtype, filters, nbytes, fail)
        try:
            out = np.empty(found, dtype=dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype)
            if out.size:
                dset.read_direct(out)
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            fail(f"cannot be read ({e})")
        return out

    def _check_chunks(self, chunks, dtype, filters, nbytes, fail):
        """A chunk larger than its dataset (allowed for extensible datasets) or a deflated chunk
        that inflates past its size would make HDF5 allocate what the file declares."""
        chunk_bytes = int(np.prod(chunks, dtype=object)) * dtype.itemsize
        if chunk_bytes > max(nbytes, 1 << 20):
            fail(f"has chunks of {chunk_bytes} bytes, larger than the dataset's {nbytes}")
        if not filters:
            return
        # Filters run in order on write, in reverse on read: deflate is undone first when it is
        # last (fletcher32 after it only appends a 4-byte checksum).
        tail = filters[filters.index(_DEFLATE) + 1:] if _DEFLATE in filters else []
        if tail not in ([], [_FLETCHER32]):
            fail(f"applies filters {filters}: deflate followed by another filter is not read")
        try:
            count = self._obj.id.get_num_chunks()
            infos = [self._obj.id.get_chunk_info(i) for i in range(count)]
        except (OSError, RuntimeError, ValueError, AttributeError) as e:
            fail(f"has an unreadable chunk index ({e})")
        # What deflate adds to incompressible data, plus the checksum: a larger stored chunk is a
        # lie HDF5 would allocate for (and read as zeros past the end of the file).
        most = chunk_bytes + chunk_bytes // 1000 + 64
        for info in infos:
            if info.size > most:
                fail(f"has a chunk at {info.chunk_offset} stored in {info.size} bytes, more than its "
                     f"{chunk_bytes} bytes can take")
            if _DEFLATE not in filters or info.filter_mask & (1 << filters.index(_DEFLATE)):
                continue  # not deflated (a chunk may be stored with a filter skipped)
            try:
                _, raw = self._obj.id.read_direct_chunk(info.chunk_offset)
            except (OSError, RuntimeError, ValueError) as e:
                fail(f"has an unreadable chunk at {info.chunk_offset} ({e})")
            if tail:
                raw = raw[:-4]
            try:
                produced = len(zlib.decompressobj().decompress(raw, chunk_bytes + 1))
            except zlib.error as e:
                fail(f"has a corrupt deflated chunk at {info.chunk_offset} ({e})")
            if produced > chunk_bytes:
                fail(f"has a deflated chunk at {info.chunk_offset} that inflates past its {chunk_bytes} bytes")
