/* A columnar decoder of XSpace protobuf bytes.
 *
 * Parsing a profile with the protobuf runtime builds one message object per event and then
 * needs a Python loop per event to reach columns; for profiles with millions of events that
 * is slow and several times the file size in memory. This decoder walks the wire format once
 * and fills flat arrays (events, lines, stats), which Python wraps as NumPy arrays without a
 * copy. The small parts (plane names, metadata maps, plane stats, hostnames) are handed back
 * as the raw bytes of those fields, for the protobuf runtime to parse.
 *
 * Field numbers are those of XProf's xplane.proto (see formats/xplane_proto.py).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE  /* mremap */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

/* ---- growable arrays ------------------------------------------------------------------- */

/* A column grows by doubling. Through malloc, each doubling copies the column into a new
 * block (touching every page of it) and leaves the old one as a hole in the heap: the load's
 * resident memory was about twice its columns'. On Linux a column past BUF_MAP_BYTES lives in
 * its own anonymous mapping instead: mremap grows it without copying, pages never written
 * stay unbacked, and the column is trimmed to its pages when handed over. */
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#define BUF_MAP_BYTES ((size_t)1 << 20)
#endif

typedef struct {
    char *data;
    size_t len;  /* in bytes */
    size_t cap;  /* in bytes */
    int mapped;  /* data is an anonymous mapping of cap bytes (Linux) */
} Buf;

static void
buf_free(Buf *b)
{
#if defined(__linux__)
    if (b->mapped) {
        munmap(b->data, b->cap);
    } else
#endif
    {
        PyMem_RawFree(b->data);
    }
    b->data = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
}

/* decode_table walks the file without the GIL (other threads run beside a long decode), so
 * an error raised on the way takes the GIL for the moment of setting it. PyGILState_Ensure
 * is also right where the GIL is held already (decode, scan): it only counts.
 *
 * Where decode_table walks the file's two halves on two threads, a Python exception set by
 * the helper thread would land on that thread's own state and be lost, and which half's
 * error is raised must not depend on timing: each thread's errors then go to its ErrSink
 * (the first one kept), raised by the calling thread once both are joined. */
enum { ERR_NONE = 0, ERR_BAD, ERR_MEMORY, ERR_OS, ERR_OVERFLOW };

typedef struct {
    int kind;
    const char *what;  /* ERR_BAD, ERR_OVERFLOW: a static string */
    int err;           /* ERR_OS: errno */
} ErrSink;

static __thread ErrSink *err_sink;  /* this thread's, while it walks a half; else NULL */

static int
sink_error(int kind, const char *what, int err)
{
    if (err_sink == NULL) return 0;
    if (err_sink->kind == ERR_NONE) {
        err_sink->kind = kind;
        err_sink->what = what;
        err_sink->err = err;
    }
    return 1;
}

static void
no_memory(void)
{
    if (sink_error(ERR_MEMORY, NULL, 0)) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyErr_NoMemory();
    PyGILState_Release(gil);
}

static void
os_error(int err)
{
    if (sink_error(ERR_OS, NULL, err)) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    PyGILState_Release(gil);
}

static int
buf_reserve(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        cap *= 2;
    }
#if defined(__linux__)
    if (cap >= BUF_MAP_BYTES) {
        char *data;
        if (b->mapped) {
            data = mremap(b->data, b->cap, cap, MREMAP_MAYMOVE);
        } else {
            data = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (data != MAP_FAILED && b->len) {
                memcpy(data, b->data, b->len);
            }
        }
        if (data == MAP_FAILED) {
            no_memory();
            return -1;
        }
        if (!b->mapped) {
            PyMem_RawFree(b->data);
        }
        b->data = data;
        b->cap = cap;
        b->mapped = 1;
        return 0;
    }
#endif
    char *data = PyMem_RawRealloc(b->data, cap);
    if (data == NULL) {
        no_memory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Give back the capacity past the column's last page (a mapping) or its last byte. */
static void
buf_trim(Buf *b)
{
#if defined(__linux__)
    if (b->mapped) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t keep = (b->len + page - 1) / page * page;
        if (keep == 0) keep = page;
        if (keep < b->cap && mremap(b->data, b->cap, keep, 0) != MAP_FAILED) {
            b->cap = keep;
        }
        return;
    }
#endif
    if (b->len && b->len < b->cap) {
        char *data = PyMem_RawRealloc(b->data, b->len);
        if (data != NULL) {
            b->data = data;
            b->cap = b->len;
        }
    }
}

static inline int
buf_put(Buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap && buf_reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

#define PUT(b, type, value)            \
    do {                               \
        type v_ = (type)(value);       \
        if (buf_put((b), &v_, sizeof v_) < 0) \
            goto fail;                 \
    } while (0)

/* ---- an object that owns a Buf and exposes it through the buffer protocol -------------- */

typedef struct {
    PyObject_HEAD
    Buf buf;
} ColumnObject;

static void
Column_dealloc(ColumnObject *self)
{
    buf_free(&self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Column_getbuffer(ColumnObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->buf.data ? self->buf.data : empty,
                             (Py_ssize_t)self->buf.len, 0, flags);
}

static PyBufferProcs Column_as_buffer = {(getbufferproc)Column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.formats._xspace_decode.Column",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoded column bytes (read with numpy.frombuffer).",
};

/* Hand a Buf over to a new Column object (the Buf is emptied). */
static PyObject *
column_from(Buf *b)
{
    ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
    if (col == NULL) {
        return NULL;
    }
    buf_trim(b);
    col->buf = *b;
    b->data = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
    return (PyObject *)col;
}

/* ---- wire format ----------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

static void
raise_bad(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed XSpace data: %s", what);
}

static int
bad(const char *what)
{
    if (sink_error(ERR_BAD, what, 0)) return -1;
    PyGILState_STATE gil = PyGILState_Ensure();
    raise_bad(what);
    PyGILState_Release(gil);
    return -1;
}

/* Raise what a sink holds (the GIL held): 0, or -1 with the exception set. */
static int
sink_raise(const ErrSink *sink)
{
    switch (sink->kind) {
    case ERR_NONE:
        return 0;
    case ERR_BAD:
        raise_bad(sink->what);
        break;
    case ERR_MEMORY:
        PyErr_NoMemory();
        break;
    case ERR_OVERFLOW:
        PyErr_SetString(PyExc_OverflowError, sink->what);
        break;
    default:
        errno = sink->err;
        PyErr_SetFromErrno(PyExc_OSError);
    }
    return -1;
}

static inline int
read_varint(Reader *r, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    while (r->p < r->end) {
        uint8_t byte = *r->p++;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
        if (shift >= 70) {
            return bad("varint too long");
        }
    }
    return bad("truncated varint");
}

/* Read a field key; returns 0 at the end of the message, 1 with a key, -1 on error. */
static inline int
read_key(Reader *r, uint32_t *field, uint32_t *wire)
{
    if (r->p >= r->end) {
        return 0;
    }
    uint64_t key = 0;  /* (set where read_varint returns 0; inlined, the compiler cannot tell) */
    if (read_varint(r, &key) < 0) {
        return -1;
    }
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    return 1;
}

static inline int
read_len(Reader *r, Reader *sub)
{
    uint64_t n = 0;
    if (read_varint(r, &n) < 0) {
        return -1;
    }
    if (n > (uint64_t)(r->end - r->p)) {
        return bad("length past the end of the data");
    }
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return 0;
}

static int
skip_field(Reader *r, uint32_t wire)
{
    uint64_t v;
    Reader sub = {NULL, NULL};
    switch (wire) {
    case 0:
        return read_varint(r, &v);
    case 1:
        if (r->end - r->p < 8) {
            return bad("truncated fixed64");
        }
        r->p += 8;
        return 0;
    case 2:
        return read_len(r, &sub);
    case 5:
        if (r->end - r->p < 4) {
            return bad("truncated fixed32");
        }
        r->p += 4;
        return 0;
    default:
        return bad("unsupported wire type");
    }
}

/* Copy one field (its key re-encoded, then its payload) to `out`, for protobuf to parse. */
static int
copy_field(Reader *r, uint32_t field, uint32_t wire, Buf *out)
{
    const uint8_t *start = r->p;
    uint8_t key[10];
    size_t n = 0;
    uint64_t k = ((uint64_t)field << 3) | wire;
    do {
        key[n++] = (uint8_t)((k & 0x7F) | (k > 0x7F ? 0x80 : 0));
        k >>= 7;
    } while (k);
    if (skip_field(r, wire) < 0) {
        return -1;
    }
    if (buf_put(out, key, n) < 0 || buf_put(out, start, (size_t)(r->p - start)) < 0) {
        return -1;
    }
    return 0;
}

/* ---- decoding -------------------------------------------------------------------------- */

enum { KIND_DOUBLE = 1, KIND_UINT64 = 2, KIND_INT64 = 3, KIND_STR = 4, KIND_BYTES = 5,
       KIND_REF = 6 };

typedef struct {
    /* events */
    Buf ev_line;        /* int32: index into the lines columns */
    Buf ev_metadata;    /* int64: XEvent.metadata_id */
    Buf ev_offset_ps;   /* int64 */
    Buf ev_duration_ps; /* int64 */
    Buf ev_nstats;      /* int32: number of stats of the event */
    Buf ev_occurrences; /* int64 pairs (event index, num_occurrences), rare */
    /* lines */
    Buf ln_plane;       /* int32: index into the planes list */
    Buf ln_id, ln_display_id, ln_timestamp_ns, ln_duration_ps; /* int64 */
    /* stats of events */
    Buf st_metadata;    /* int64 */
    Buf st_kind;        /* int8 */
    Buf st_value;       /* int64: value (double as its bits), or offset into blob */
    Buf st_len;         /* int32: length in blob for str/bytes, else 0 */
    Buf blob;           /* bytes of str/bytes stat values */
    PyObject *line_names, *line_display_names; /* lists of str */
    PyObject *planes;   /* list of bytes: each plane's fields except its lines */
    int64_t n_events;
} State;

/* One XStat's fields: its metadata id, kind and value (a text's bytes in ``text``; where a
 * field comes twice, the last wins, as protobuf has it). 0, or -1 with an exception. */
static int
parse_stat(Reader *r, int64_t *metadata_id, int8_t *kind, int64_t *value, Reader *text)
{
    uint32_t field, wire;
    int more;
    *metadata_id = 0;
    *value = 0;
    *kind = 0;
    text->p = text->end = NULL;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (field == 1 && wire == 0) {
            if (read_varint(r, &v) < 0) return -1;
            *metadata_id = (int64_t)v;
        } else if (field == 2 && wire == 1) {
            if (r->end - r->p < 8) return bad("truncated double");
            memcpy(value, r->p, 8);
            r->p += 8;
            *kind = KIND_DOUBLE;
        } else if ((field == 3 || field == 4 || field == 7) && wire == 0) {
            if (read_varint(r, &v) < 0) return -1;
            *value = (int64_t)v;
            *kind = field == 3 ? KIND_UINT64 : field == 4 ? KIND_INT64 : KIND_REF;
        } else if ((field == 5 || field == 6) && wire == 2) {
            if (read_len(r, text) < 0) return -1;
            *kind = field == 5 ? KIND_STR : KIND_BYTES;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    return more < 0 ? -1 : 0;
}

static int
decode_stat(State *s, Reader *r)
{
    int64_t metadata_id, value;
    int8_t kind;
    int32_t len = 0;
    Reader text;
    if (parse_stat(r, &metadata_id, &kind, &value, &text) < 0) return -1;
    if (kind == KIND_STR || kind == KIND_BYTES) {
        value = (int64_t)s->blob.len;
        len = (int32_t)(text.end - text.p);
        if (buf_put(&s->blob, text.p, (size_t)len) < 0) return -1;
    }
    PUT(&s->st_metadata, int64_t, metadata_id);
    PUT(&s->st_kind, int8_t, kind);
    PUT(&s->st_value, int64_t, value);
    PUT(&s->st_len, int32_t, len);
    return 0;
fail:
    return -1;
}

static int
decode_event(State *s, Reader *r, int32_t line_index)
{
    uint32_t field, wire;
    int64_t metadata_id = 0, offset = 0, duration = 0, occurrences = 0;
    int32_t nstats = 0;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 2 || field == 3 || field == 5)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) metadata_id = (int64_t)v;
            else if (field == 2) offset = (int64_t)v;
            else if (field == 3) duration = (int64_t)v;
            else occurrences = (int64_t)v;
        } else if (field == 4 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_stat(s, &sub) < 0) return -1;
            nstats++;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->ev_line, int32_t, line_index);
    PUT(&s->ev_metadata, int64_t, metadata_id);
    PUT(&s->ev_offset_ps, int64_t, offset);
    PUT(&s->ev_duration_ps, int64_t, duration);
    PUT(&s->ev_nstats, int32_t, nstats);
    if (occurrences) {
        PUT(&s->ev_occurrences, int64_t, s->n_events);
        PUT(&s->ev_occurrences, int64_t, occurrences);
    }
    s->n_events++;
    return 0;
fail:
    return -1;
}

static int
append_str(PyObject *list, Reader *sub)
{
    PyObject *str = PyUnicode_DecodeUTF8((const char *)sub->p, sub->end - sub->p, "replace");
    if (str == NULL) return -1;
    int rc = PyList_Append(list, str);
    Py_DECREF(str);
    return rc;
}

static int
decode_line(State *s, Reader *r, int32_t plane_index)
{
    uint32_t field, wire;
    int64_t id = 0, display_id = 0, timestamp = 0, duration = 0;
    Reader name = {NULL, NULL}, display_name = {NULL, NULL};
    int32_t line_index = (int32_t)(s->ln_plane.len / sizeof(int32_t));
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 10 || field == 3 || field == 9)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) id = (int64_t)v;
            else if (field == 10) display_id = (int64_t)v;
            else if (field == 3) timestamp = (int64_t)v;
            else duration = (int64_t)v;
        } else if (wire == 2 && field == 2) {
            if (read_len(r, &name) < 0) return -1;
        } else if (wire == 2 && field == 11) {
            if (read_len(r, &display_name) < 0) return -1;
        } else if (wire == 2 && field == 4) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_event(s, &sub, line_index) < 0) return -1;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->ln_plane, int32_t, plane_index);
    PUT(&s->ln_id, int64_t, id);
    PUT(&s->ln_display_id, int64_t, display_id);
    PUT(&s->ln_timestamp_ns, int64_t, timestamp);
    PUT(&s->ln_duration_ps, int64_t, duration);
    Reader none = {(const uint8_t *)"", (const uint8_t *)""};
    if (append_str(s->line_names, name.p ? &name : &none) < 0) return -1;
    if (append_str(s->line_display_names, display_name.p ? &display_name : &none) < 0)
        return -1;
    return 0;
fail:
    return -1;
}

static int
decode_plane(State *s, Reader *r, int32_t plane_index)
{
    /* Everything but the lines is copied, key and all, for the protobuf runtime to parse. */
    Buf rest = {NULL, 0, 0};
    uint32_t field, wire;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        if (field == 3 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_line(s, &sub, plane_index) < 0) goto fail;
        } else if (copy_field(r, field, wire, &rest) < 0) {
            goto fail;
        }
    }
    if (more < 0) goto fail;
    PyObject *bytes = PyBytes_FromStringAndSize(rest.data ? rest.data : "", rest.len);
    buf_free(&rest);
    if (bytes == NULL) return -1;
    int rc = PyList_Append(s->planes, bytes);
    Py_DECREF(bytes);
    return rc;
fail:
    buf_free(&rest);
    return -1;
}

static void
state_free(State *s)
{
    Buf *bufs[] = {&s->ev_line, &s->ev_metadata, &s->ev_offset_ps, &s->ev_duration_ps,
                   &s->ev_nstats, &s->ev_occurrences, &s->ln_plane, &s->ln_id,
                   &s->ln_display_id, &s->ln_timestamp_ns, &s->ln_duration_ps,
                   &s->st_metadata, &s->st_kind, &s->st_value, &s->st_len, &s->blob};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        buf_free(bufs[i]);
    }
    Py_XDECREF(s->line_names);
    Py_XDECREF(s->line_display_names);
    Py_XDECREF(s->planes);
}

static int
add_column(PyObject *dict, const char *name, Buf *b)
{
    PyObject *col = column_from(b);
    if (col == NULL) return -1;
    int rc = PyDict_SetItemString(dict, name, col);
    Py_DECREF(col);
    return rc;
}

static PyObject *
decode(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    State s;
    memset(&s, 0, sizeof s);
    Buf space_rest = {NULL, 0, 0};
    PyObject *result = NULL;
    s.line_names = PyList_New(0);
    s.line_display_names = PyList_New(0);
    s.planes = PyList_New(0);
    if (s.line_names == NULL || s.line_display_names == NULL || s.planes == NULL) goto done;

    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    uint32_t field, wire;
    int more;
    int32_t plane_index = 0;
    while ((more = read_key(&r, &field, &wire)) == 1) {
        if (field == 1 && wire == 2) {
            Reader sub;
            if (read_len(&r, &sub) < 0 || decode_plane(&s, &sub, plane_index++) < 0) goto done;
        } else if (copy_field(&r, field, wire, &space_rest) < 0) {
            goto done;
        }
    }
    if (more < 0) goto done;

    PyObject *out = PyDict_New();
    if (out == NULL) goto done;
    PyObject *rest = PyBytes_FromStringAndSize(space_rest.data ? space_rest.data : "",
                                               space_rest.len);
    if (rest == NULL || PyDict_SetItemString(out, "space_rest", rest) < 0 ||
        PyDict_SetItemString(out, "planes", s.planes) < 0 ||
        PyDict_SetItemString(out, "line_name", s.line_names) < 0 ||
        PyDict_SetItemString(out, "line_display_name", s.line_display_names) < 0 ||
        add_column(out, "ev_line", &s.ev_line) < 0 ||
        add_column(out, "ev_metadata", &s.ev_metadata) < 0 ||
        add_column(out, "ev_offset_ps", &s.ev_offset_ps) < 0 ||
        add_column(out, "ev_duration_ps", &s.ev_duration_ps) < 0 ||
        add_column(out, "ev_nstats", &s.ev_nstats) < 0 ||
        add_column(out, "ev_occurrences", &s.ev_occurrences) < 0 ||
        add_column(out, "ln_plane", &s.ln_plane) < 0 ||
        add_column(out, "ln_id", &s.ln_id) < 0 ||
        add_column(out, "ln_display_id", &s.ln_display_id) < 0 ||
        add_column(out, "ln_timestamp_ns", &s.ln_timestamp_ns) < 0 ||
        add_column(out, "ln_duration_ps", &s.ln_duration_ps) < 0 ||
        add_column(out, "st_metadata", &s.st_metadata) < 0 ||
        add_column(out, "st_kind", &s.st_kind) < 0 ||
        add_column(out, "st_value", &s.st_value) < 0 ||
        add_column(out, "st_len", &s.st_len) < 0 ||
        add_column(out, "blob", &s.blob) < 0) {
        Py_XDECREF(rest);
        Py_DECREF(out);
        goto done;
    }
    Py_DECREF(rest);
    result = out;
done:
    buf_free(&space_rest);
    state_free(&s);
    PyBuffer_Release(&view);
    return result;
}

/* ---- the table decoder: final columns, read from a file in pieces ---------------------
 *
 * `decode` above hands back the wire's columns as they are (picoseconds, metadata ids, an
 * int64 event row per stat); turning them into a host's table takes as much memory again,
 * and the file's bytes are held meanwhile. `scan` and `decode_table` instead read the file
 * through a window of a few MB (or a buffer in memory) and write the table's own columns:
 * event names and stat names as the table's codes (the planes' metadata, which `scan` hands
 * to Python first, mapped to codes there), start and duration in ns, typed stats apart, the
 * other stats with an int32 event row, str/bytes values as indices of texts kept one after
 * another. Field by field it does what xspace_to_tables.py's
 * `from_columns` does with `decode`'s columns; tests hold the two to the same tables.
 */

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

#define WINDOW (4u << 20)
/* Bytes read at a time by a walk over keys that skips the lines' bodies (scan, skim_plan): a
 * 4 MB window a line would read 4 MB to find its next key. */
#define KEY_WINDOW (64u << 10)

typedef struct {
    const uint8_t *mem;  /* the whole data, when decoding a buffer; else NULL */
    int fd;              /* else the file, read with pread */
    uint8_t *win;
    size_t win_cap, win_len;
    int64_t win_off;     /* file offset of win[0] */
    int64_t size;
    int nogil;           /* the caller released the GIL: reads need not */
    size_t window;       /* bytes read at a time; 0: WINDOW */
} Source;

/* pread [off, off + want) into win until it is full or the file ends: the bytes read (an
 * error stops it, its errno in *err, else 0). */
static size_t
source_read(const Source *s, int64_t off, size_t want, int *err)
{
    size_t got = 0;
    *err = 0;
    while (got < want) {
        ssize_t r = pread(s->fd, s->win + got, want - got, (off_t)(off + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { *err = errno; break; }
        if (r == 0) break;
        got += (size_t)r;
    }
    return got;
}

/* Bytes [off, off + n) of the source (the caller checked that they lie inside it). */
static const uint8_t *
source_need(Source *s, int64_t off, size_t n)
{
    if (s->mem != NULL) {
        return s->mem + off;
    }
    if (off >= s->win_off && (uint64_t)(off - s->win_off) + n <= s->win_len) {
        return s->win + (off - s->win_off);
    }
    size_t window = s->window ? s->window : WINDOW;
    size_t want = n > window ? n : window;
    if ((int64_t)want > s->size - off) {
        want = (size_t)(s->size - off);
    }
    if (want > s->win_cap) {
        uint8_t *win = PyMem_RawRealloc(s->win, want);
        if (win == NULL) {
            no_memory();
            return NULL;
        }
        s->win = win;
        s->win_cap = want;
    }
    size_t got;
    int err;
    if (s->nogil) {
        got = source_read(s, off, want, &err);
    } else {
        Py_BEGIN_ALLOW_THREADS
        got = source_read(s, off, want, &err);
        Py_END_ALLOW_THREADS
    }
    if (err) {
        os_error(err);
        return NULL;
    }
    s->win_off = off;
    s->win_len = got;
    if (got < n) {
        bad("truncated: the file is shorter than when it was opened");
        return NULL;
    }
    return s->win;
}

/* A varint at *off (before end); *off moves past it. */
static int
src_varint(Source *s, int64_t *off, int64_t end, uint64_t *out)
{
    size_t avail = end - *off < 10 ? (size_t)(end - *off) : 10;
    const uint8_t *p = source_need(s, *off, avail);
    if (p == NULL) return -1;
    Reader r = {p, p + avail};
    if (read_varint(&r, out) < 0) return -1;
    *off += r.p - p;
    return 0;
}

/* A field key at *off: 0 at the end of the message, 1 with a key, -1 on error. */
static int
src_key(Source *s, int64_t *off, int64_t end, uint32_t *field, uint32_t *wire)
{
    if (*off >= end) return 0;
    uint64_t key;
    if (src_varint(s, off, end, &key) < 0) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    return 1;
}

/* A length-delimited field's payload as [*sub, *sub_end); *off moves past it. */
static int
src_len(Source *s, int64_t *off, int64_t end, int64_t *sub, int64_t *sub_end)
{
    uint64_t n;
    if (src_varint(s, off, end, &n) < 0) return -1;
    if (n > (uint64_t)(end - *off)) return bad("length past the end of the data");
    *sub = *off;
    *sub_end = *off + (int64_t)n;
    *off += (int64_t)n;
    return 0;
}

static int
src_skip(Source *s, int64_t *off, int64_t end, uint32_t wire)
{
    uint64_t v;
    int64_t a, b;
    switch (wire) {
    case 0:
        return src_varint(s, off, end, &v);
    case 1:
        if (end - *off < 8) return bad("truncated fixed64");
        *off += 8;
        return 0;
    case 2:
        return src_len(s, off, end, &a, &b);
    case 5:
        if (end - *off < 4) return bad("truncated fixed32");
        *off += 4;
        return 0;
    default:
        return bad("unsupported wire type");
    }
}

/* Copy the field at *off (its key re-encoded, then its payload) to `out`. */
static int
src_copy_field(Source *s, int64_t *off, int64_t end, uint32_t field, uint32_t wire, Buf *out)
{
    int64_t start = *off;
    if (src_skip(s, off, end, wire) < 0) return -1;
    const uint8_t *p = source_need(s, start, (size_t)(*off - start));
    if (p == NULL) return -1;
    Reader r = {p, p + (*off - start)};
    return copy_field(&r, field, wire, out);
}

/* `source` is an int (a file descriptor, read from offset 0 to its size) or a buffer. */
static int
source_open(Source *s, PyObject *arg, Py_buffer *view)
{
    memset(s, 0, sizeof *s);
    view->obj = NULL;
    if (PyLong_Check(arg)) {
        s->fd = (int)PyLong_AsLong(arg);
        if (s->fd == -1 && PyErr_Occurred()) return -1;
        struct stat st;
        if (fstat(s->fd, &st) < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        s->size = (int64_t)st.st_size;
        s->win_off = -1;
        return 0;
    }
    if (PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) < 0) return -1;
    s->mem = (const uint8_t *)view->buf;
    s->size = (int64_t)view->len;
    return 0;
}

static void
source_close(Source *s, Py_buffer *view)
{
    PyMem_RawFree(s->win);
    s->win = NULL;
    if (view->obj != NULL) PyBuffer_Release(view);
}

/* ---- a message's fields, a chunk of the file at a time -------------------------------- */

/* A message's fields read a chunk of the source's window at a time: the walk over a line's
 * events does not go through the window (and its checks) for every key and length. */
typedef struct {
    Source *src;
    int64_t off, end;         /* the message's rest: its next field is at file offset off */
    const uint8_t *p, *lim;   /* bytes of the window from off on (p: off's), up to lim */
} FieldIter;

/* Inlined where the compiler would not (the skim's loop is a fifth slower through a call). */
#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* Bits of v > 0 (its bit length). */
static inline int
bit_length(uint64_t v)
{
#if defined(__GNUC__) || defined(__clang__)
    return v ? 64 - __builtin_clzll(v) : 0;
#else
    int n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
#endif
}

/* A varint at *q before lim: 0 (q moved past it), 1 where lim cuts it, -1 if too long. */
static inline int
peek_varint(const uint8_t **q, const uint8_t *lim, uint64_t *out)
{
    uint64_t v = 0;
    const uint8_t *p = *q;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= lim) return 1;
        uint8_t byte = *p++;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            *q = p;
            return 0;
        }
    }
    bad("varint too long");
    return -1;
}

/* peek_varint with the one- and two-byte varints (keys, lengths, most ids) read inline. */
static inline int
fast_varint(const uint8_t **q, const uint8_t *lim, uint64_t *out)
{
    const uint8_t *p = *q;
    if (p < lim && !(p[0] & 0x80)) {
        *out = p[0];
        *q = p + 1;
        return 0;
    }
    if (lim - p >= 2 && !(p[1] & 0x80)) {
        *out = (uint64_t)(p[0] & 0x7F) | ((uint64_t)p[1] << 7);
        *q = p + 2;
        return 0;
    }
    return peek_varint(q, lim, out);
}

/* A varint of up to 8 bytes read from the 8 bytes at p (all readable) at once, without a
 * branch per byte (an event's offset, 6 or 7 bytes in picoseconds, is the skim's longest
 * field): its length in bytes, or 0 where it is longer than 8 bytes. */
static inline int
word_varint(const uint8_t *p, uint64_t *out)
{
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = (w << 8) | p[i];  /* (compiled to one load) */
    uint64_t ends = ~w & 0x8080808080808080ULL;  /* the high bit clear: a varint's last byte */
    uint64_t x = w & (ends ^ (ends - 1)) & 0x7F7F7F7F7F7F7F7FULL;  /* its bytes' 7 bits */
    /* The 7-bit groups closed up: pairs, then pairs of pairs, then the two halves. */
    x = (x & 0x007F007F007F007FULL) | ((x & 0x7F007F007F007F00ULL) >> 1);
    x = (x & 0x00003FFF00003FFFULL) | ((x & 0x3FFF00003FFF0000ULL) >> 2);
    x = (x & 0x000000000FFFFFFFULL) | ((x & 0x0FFFFFFF00000000ULL) >> 4);
    *out = x;  /* (longer than 8 bytes: the first 8 bytes' bits, for quick_varint) */
    return bit_length(ends & -ends) / 8;  /* (bit 8n - 1 set: bit length 8n; none: 0) */
}

/* A varint read from the 10 bytes at p (all readable), a word at once (and the last two of
 * a 9- or 10-byte one, a negative or big number's, after it): its length in bytes, 0 where
 * it is longer than 10. The same value as read_varint's. */
static ALWAYS_INLINE int
quick_varint(const uint8_t *p, uint64_t *out)
{
    if (!(p[0] & 0x80)) {
        *out = p[0];
        return 1;
    }
    int n = word_varint(p, out);
    if (n > 0) return n;
    if (!(p[8] & 0x80)) {
        *out |= (uint64_t)p[8] << 56;
        return 9;
    }
    if (!(p[9] & 0x80)) {
        *out |= (uint64_t)(p[8] & 0x7F) << 56 | (uint64_t)p[9] << 63;
        return 10;
    }
    return 0;
}

/* Bytes readable past the end of an event or stat that the quick reads (event_head,
 * stat_quick, skim_event_ordered) ask for: a varint there starts before the end and reads
 * at most 10 bytes. */
#define QUICK_MARGIN 16

/* The metadata id, offset and duration at the head of an event's bytes [p, end), where they
 * come as protobuf writers put them (each at most once, in that order), read a word a varint
 * (QUICK_MARGIN bytes readable past end): where the rest of the event starts, v[] set for
 * those read. A varint past end stops it there, for the general rule. */
static ALWAYS_INLINE const uint8_t *
event_head(const uint8_t *p, const uint8_t *end, uint64_t v[3])
{
    for (int f = 0; f < 3; f++) {
        if (p < end && p[0] == (uint8_t)((f + 1) << 3)) {  /* field f + 1, a varint */
            uint64_t x;
            int k = quick_varint(p + 1, &x);
            if (k == 0 || k > end - (p + 1)) return p;
            v[f] = x;
            p += 1 + k;
        }
    }
    return p;
}

/* The window from it->off on, at least `need` bytes of it where the message has them. */
static int
iter_fill(FieldIter *it, size_t need)
{
    int64_t rest = it->end - it->off;
    size_t n = need < (size_t)rest ? need : (size_t)rest;
    const uint8_t *p = source_need(it->src, it->off, n);
    if (p == NULL) return -1;
    int64_t avail = it->src->mem != NULL ? it->src->size - it->off
                    : it->src->win_off + (int64_t)it->src->win_len - it->off;
    it->p = p;
    it->lim = p + (avail < rest ? avail : rest);
    return 0;
}

/* The message's next field: 1 with its key, its key's file offset (*at), a varint's value
 * (*v) or a length-delimited payload in memory ([*a, *b)); 0 at the message's end; -1 on
 * an error. */
static ALWAYS_INLINE int
iter_next(FieldIter *it, uint32_t *field, uint32_t *wire, int64_t *at, uint64_t *v,
          const uint8_t **a, const uint8_t **b)
{
    if (it->off >= it->end) return 0;
    for (;;) {
        const uint8_t *q = it->p;
        size_t need = 24;  /* a key and a varint, or a key and a length */
        uint64_t key, n;
        int rc = it->p == NULL ? 1 : fast_varint(&q, it->lim, &key);
        if (rc == 0) {
            *field = (uint32_t)(key >> 3);
            *wire = (uint32_t)(key & 7);
            switch (*wire) {
            case 0:
                rc = fast_varint(&q, it->lim, v);
                break;
            case 1:
            case 5: {
                size_t k = *wire == 1 ? 8 : 4;
                if ((size_t)(it->lim - q) >= k) q += k;
                else rc = 1;
                break;
            }
            case 2:
                rc = fast_varint(&q, it->lim, &n);
                if (rc != 0) break;
                if (n > (uint64_t)(it->end - it->off - (q - it->p))) {
                    return bad("length past the end of the data");
                }
                if ((uint64_t)(it->lim - q) < n) {
                    rc = 1;
                    need = (size_t)(q - it->p) + (size_t)n;
                } else {
                    *a = q;
                    *b = q + n;
                    q += n;
                }
                break;
            default:
                return bad("unsupported wire type");
            }
        }
        if (rc < 0) return -1;
        if (rc == 0) {
            *at = it->off;
            it->off += q - it->p;
            it->p = q;
            return 1;
        }
        /* Cut by the chunk's end: the field is read again from a fresh chunk, unless the
         * chunk held the message's end already. */
        if (it->p != NULL && it->lim - it->p >= it->end - it->off) {
            return bad("truncated field");
        }
        if (iter_fill(it, need) < 0) return -1;
    }
}

/* A field's key and a one-byte length: the events' usual head (0x22: field 4, bytes). */
#define EVENT_KEY 0x22
/* Bytes of the window a run of events read by skim_line's fast loop keeps clear of its end:
 * the longest event it reads there (a one-byte length) and the quick reads' QUICK_MARGIN. */
#define EVENT_RUN_MARGIN (2 + 127 + QUICK_MARGIN)

/* scan(source) -> (space_rest: bytes, planes: list of bytes): every field but the planes'
 * lines, which are skipped unread. */
static PyObject *
scan(PyObject *module, PyObject *arg)
{
    Source s;
    Py_buffer view;
    Buf space_rest = {NULL, 0, 0}, rest = {NULL, 0, 0};
    PyObject *planes = NULL, *result = NULL;
    if (source_open(&s, arg, &view) < 0) return NULL;
    s.window = KEY_WINDOW;
    planes = PyList_New(0);
    if (planes == NULL) goto done;
    int64_t off = 0;
    uint32_t field, wire;
    int more;
    while ((more = src_key(&s, &off, s.size, &field, &wire)) == 1) {
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(&s, &off, s.size, &p, &pend) < 0) goto done;
            int more2;
            rest.len = 0;
            while ((more2 = src_key(&s, &p, pend, &field, &wire)) == 1) {
                if (field == 3 && wire == 2) {
                    int64_t a, b;
                    if (src_len(&s, &p, pend, &a, &b) < 0) goto done;
                } else if (src_copy_field(&s, &p, pend, field, wire, &rest) < 0) {
                    goto done;
                }
            }
            if (more2 < 0) goto done;
            PyObject *bytes = PyBytes_FromStringAndSize(rest.data ? rest.data : "", rest.len);
            if (bytes == NULL) goto done;
            int rc = PyList_Append(planes, bytes);
            Py_DECREF(bytes);
            if (rc < 0) goto done;
        } else if (src_copy_field(&s, &off, s.size, field, wire, &space_rest) < 0) {
            goto done;
        }
    }
    if (more < 0) goto done;
    PyObject *head = PyBytes_FromStringAndSize(space_rest.data ? space_rest.data : "",
                                               space_rest.len);
    if (head == NULL) goto done;
    result = PyTuple_Pack(2, head, planes);
    Py_DECREF(head);
done:
    Py_XDECREF(planes);
    buf_free(&space_rest);
    buf_free(&rest);
    source_close(&s, &view);
    return result;
}

/* A plane's metadata ids → the table's codes: a direct table when the ids are small and
 * dense (they usually are), else a binary search over the sorted ids. */
typedef struct {
    int32_t *direct;
    int64_t ndirect;
    const int64_t *keys;
    const int32_t *codes;
    int64_t nkeys;
} Map;

static inline int32_t
map_lookup(const Map *m, int64_t id)
{
    if (m->direct != NULL) {
        return (uint64_t)id < (uint64_t)m->ndirect ? m->direct[id] : -1;
    }
    int64_t lo = 0, hi = m->nkeys;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (m->keys[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->nkeys && m->keys[lo] == id ? m->codes[lo] : -1;
}

/* Map from (keys: int64 buffer sorted ascending, codes: int32 buffer); views are kept in
 * `views` (released by the caller). */
static int
map_init(Map *m, PyObject *keys, PyObject *codes, Py_buffer *kv, Py_buffer *cv)
{
    memset(m, 0, sizeof *m);
    if (PyObject_GetBuffer(keys, kv, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(codes, cv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(kv);
        kv->obj = NULL;
        return -1;
    }
    m->nkeys = kv->len / (Py_ssize_t)sizeof(int64_t);
    if (cv->len / (Py_ssize_t)sizeof(int32_t) != m->nkeys) {
        PyErr_SetString(PyExc_TypeError, "a map's keys and codes differ in length");
        return -1;
    }
    m->keys = kv->buf;
    m->codes = cv->buf;
    if (m->nkeys == 0) return 0;
    int64_t low = m->keys[0], high = m->keys[m->nkeys - 1];
    if (low >= 0 && high < 4 * m->nkeys + 4096) {
        m->ndirect = high + 1;
        m->direct = PyMem_RawMalloc((size_t)m->ndirect * sizeof(int32_t));
        if (m->direct == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t i = 0; i < m->ndirect; i++) m->direct[i] = -1;
        for (int64_t i = 0; i < m->nkeys; i++) m->direct[m->keys[i]] = m->codes[i];
    }
    return 0;
}

#define N_TYPED 4

typedef struct {
    Source src;
    /* events */
    Buf ev_line;      /* int16 or int32 (wide_lines) */
    Buf ev_name;      /* int16 or int32 (wide_names): the table's name code, -1 for an id
                       * without metadata */
    Buf ev_start;     /* int64 ns: offset, then (at the line's end) plus its timestamp */
    Buf ev_dur;       /* ns, negative ones made 0: int32 until one does not fit (wide_dur),
                       * then int64 */
    /* lines */
    Buf ln_plane;     /* int32 */
    Buf ln_id;        /* int64 */
    /* typed stats, per slot: rows (int64), values (int64) */
    Buf ty_rows[N_TYPED], ty_values[N_TYPED];
    /* the other stats */
    Buf st_event;     /* int32 */
    Buf st_name;      /* int16 or int32 (wide_stats) */
    Buf st_kind;      /* int8 */
    Buf st_value;     /* int64; a str/bytes stat's: its text's index */
    Buf st_text_end;  /* int64 per text: where it ends in blob */
    Buf blob;         /* the texts, one after another */
    int64_t n_texts;
    /* Made into Python objects once the walk (without the GIL) is done: */
    Buf ln_text;      /* each line's name then display name, one after another */
    Buf ln_text_end;  /* int64 per text: where it ends in ln_text */
    Buf pl_negative;  /* int64 per plane: its events of negative duration */
    const int8_t *slot;  /* per stat code: typed slot or -1 */
    int64_t nslot;
    int64_t n_events, unknown;
    Map *ev_map, *st_map; /* the current plane's */
    /* Codes written as int32 (1) or int16 (0): the columns the table keeps, written so
     * (no int32 column narrowed after, with both held: a fresh copy of each at 1 GB). */
    int wide_lines, wide_names, wide_stats;
    /* Durations written as int64 (1) or int32 (0): int32 until the first that does not fit,
     * where the column is widened once and goes on in int64 (long events are common: a
     * file is not decoded again for them). */
    int wide_dur;
    int *abandon;         /* the second half's: set when the first half failed */
    int tail_error;       /* the first half failed past its part of a cut line */
} Table;

/* A code as int32 (wide) or int16. */
#define PUT_CODE(b, wide, value)             \
    do {                                     \
        if (wide) {                          \
            PUT((b), int32_t, (value));      \
        } else {                             \
            PUT((b), int16_t, (value));      \
        }                                    \
    } while (0)

/* An int32 column made int64 in place, once: from the back, as each value's 8 bytes lie
 * at or past its 4. */
static int
buf_widen32(Buf *b)
{
    size_t n = b->len / sizeof(int32_t);
    if (buf_reserve(b, b->len) < 0) return -1;
    const int32_t *narrow = (const int32_t *)b->data;
    int64_t *wide = (int64_t *)b->data;
    for (size_t i = n; i-- > 0;) wide[i] = narrow[i];
    b->len = n * sizeof(int64_t);
    return 0;
}

/* The table's durations widened to int64 (where they are not yet). */
static int
table_widen_durations(Table *t)
{
    if (t->wide_dur) return 0;
    if (buf_widen32(&t->ev_dur) < 0) return -1;
    t->wide_dur = 1;
    return 0;
}

/* More lines than int16 codes hold, where the caller asked for them: OverflowError (it
 * decodes again with int32 lines). */
static int
lines_overflow(void)
{
    if (sink_error(ERR_OVERFLOW, "more lines than int16 codes hold", 0)) return -1;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyErr_SetString(PyExc_OverflowError, "more lines than int16 codes hold");
    PyGILState_Release(gil);
    return -1;
}

/* ps → ns rounded half up, as Python's (ps + 500) // 1000 on int64 (wrapping, flooring). */
static inline int64_t
ps_to_ns(int64_t ps)
{
    int64_t x = (int64_t)((uint64_t)ps + 500u);
    if (x >= 0) return (int64_t)((uint64_t)x / 1000u);  /* (the usual case: no sign to mind) */
    int64_t q = x / 1000;
    if (x % 1000 != 0) q -= 1;
    return q;
}

/* parse_stat for a stat laid out as writers lay it out, QUICK_MARGIN bytes readable past its
 * end: its metadata id (if any), then one value (if any). 1 with parse_stat's answers; 0
 * where the stat is otherwise (a field repeated, unknown, or wrong), for parse_stat. */
static ALWAYS_INLINE int
stat_quick(const uint8_t *p, const uint8_t *end, int64_t *metadata_id, int8_t *kind,
           int64_t *value, Reader *text)
{
    uint64_t md = 0, x = 0;
    int k;
    if (p < end && p[0] == 0x08) {  /* field 1, a varint */
        k = quick_varint(p + 1, &md);
        if (k == 0 || k > end - (p + 1)) return 0;
        p += 1 + k;
    }
    *kind = 0;
    *value = 0;
    text->p = text->end = NULL;
    if (p < end) {
        uint8_t key = p[0];
        if (key == 0x11) {  /* field 2: a double */
            if (end - (p + 1) < 8) return 0;
            memcpy(value, p + 1, 8);
            *kind = KIND_DOUBLE;
            p += 9;
        } else if (key == 0x18 || key == 0x20 || key == 0x38 || key == 0x2A || key == 0x32) {
            k = quick_varint(p + 1, &x);
            if (k == 0 || k > end - (p + 1)) return 0;
            p += 1 + k;
            if (key == 0x2A || key == 0x32) {  /* fields 5 and 6: text, x bytes long */
                if (x > (uint64_t)(end - p)) return 0;
                text->p = p;
                text->end = p + x;
                p += x;
                *kind = key == 0x2A ? KIND_STR : KIND_BYTES;
            } else {  /* fields 3, 4 and 7: a number */
                *value = (int64_t)x;
                *kind = key == 0x18 ? KIND_UINT64 : key == 0x20 ? KIND_INT64 : KIND_REF;
            }
        } else {
            return 0;
        }
    }
    if (p != end) return 0;
    *metadata_id = (int64_t)md;
    return 1;
}

/* One stat of event `row` (its bytes in r, readable up to lim) appended to the table. */
static int
table_stat(Table *t, Reader *r, const uint8_t *lim, int32_t row)
{
    int64_t metadata_id, value;
    int8_t kind;
    Reader text;
    int quick = lim - r->end >= QUICK_MARGIN &&
                stat_quick(r->p, r->end, &metadata_id, &kind, &value, &text);
    if (!quick && parse_stat(r, &metadata_id, &kind, &value, &text) < 0) return -1;
    int32_t code = map_lookup(t->st_map, metadata_id);
    if (kind == KIND_REF) {
        value = map_lookup(t->st_map, value);
    } else if (kind == KIND_STR || kind == KIND_BYTES) {
        /* Only the value the stat ends with is kept: texts lie one after another. */
        if (buf_put(&t->blob, text.p, (size_t)(text.end - text.p)) < 0) return -1;
        value = t->n_texts++;
        PUT(&t->st_text_end, int64_t, t->blob.len);
    }
    if ((kind == KIND_INT64 || kind == KIND_UINT64) && code >= 0 && code < t->nslot &&
        t->slot[code] >= 0) {
        int s = t->slot[code];
        PUT(&t->ty_rows[s], int64_t, row);
        PUT(&t->ty_values[s], int64_t, value);
        return 0;
    }
    PUT(&t->st_event, int32_t, row);
    PUT_CODE(&t->st_name, t->wide_stats, code);
    PUT(&t->st_kind, int8_t, kind);
    PUT(&t->st_value, int64_t, value);
    return 0;
fail:
    return -1;
}

/* One event of the line (its bytes in r, readable up to lim) appended to the table. */
static ALWAYS_INLINE int
table_event(Table *t, Reader *r, const uint8_t *lim, int32_t line_index, int64_t *negative)
{
    uint32_t field, wire;
    int64_t metadata_id = 0, offset = 0, duration = 0;
    int more;
    if (t->n_events >= INT32_MAX) return bad("more than 2**31 events");
    int32_t row = (int32_t)t->n_events;
    if (lim - r->end >= QUICK_MARGIN) {  /* its usual head at once; the rest (or all) below */
        uint64_t v[3] = {0, 0, 0};
        r->p = event_head(r->p, r->end, v);
        metadata_id = (int64_t)v[0];
        offset = (int64_t)v[1];
        duration = (int64_t)v[2];
    }
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 2 || field == 3)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) metadata_id = (int64_t)v;
            else if (field == 2) offset = (int64_t)v;
            else duration = (int64_t)v;
        } else if (field == 4 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || table_stat(t, &sub, lim, row) < 0) return -1;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    int32_t name = map_lookup(t->ev_map, metadata_id);
    if (name < 0) t->unknown++;
    int64_t dur = ps_to_ns(duration);
    if (dur < 0) {
        dur = 0;
        (*negative)++;
    }
    if (!t->wide_lines && line_index > INT16_MAX) return lines_overflow();
    PUT_CODE(&t->ev_line, t->wide_lines, line_index);
    PUT_CODE(&t->ev_name, t->wide_names, name);
    PUT(&t->ev_start, int64_t, ps_to_ns(offset));
    if (dur > INT32_MAX && table_widen_durations(t) < 0) return -1;
    if (t->wide_dur) {
        PUT(&t->ev_dur, int64_t, dur);
    } else {
        PUT(&t->ev_dur, int32_t, dur);
    }
    t->n_events++;
    return 0;
fail:
    return -1;
}

/* Line [off, end) of plane `plane_index`: its events whose key lies in [from, to) and all its
 * other fields. A line cut between the two halves is walked by both: the first half its
 * events before the cut, writing the line's row (`row`); the second half the others, which
 * take the index -1 (the first half's last line, once appended). Both read all the line's
 * other fields, as its timestamp and texts are the last ones in it. An error past `to` is
 * marked t->tail_error: the second half, which walks the same bytes before it, meets it or
 * an earlier one. */
static int
table_line(Table *t, int64_t off, int64_t end, int32_t plane_index, int64_t *negative,
           int64_t from, int64_t to, int row)
{
    uint32_t field, wire;
    int64_t id = 0, timestamp = 0;
    int64_t name[2] = {0, 0}, display_name[2] = {0, 0};  /* [start, end) in the file */
    int32_t line_index = row ? (int32_t)(t->ln_plane.len / sizeof(int32_t)) : -1;
    int64_t first = t->n_events;
    int more, tail = 0;
    FieldIter it = {&t->src, off, end, NULL, NULL};
    for (;;) {
        /* A run of events in the window, read without iter_next's general case (as the
         * skim's, skim_line): each a key EVENT_KEY and a one-byte length, at least
         * EVENT_RUN_MARGIN bytes before the window's end. */
        if (it.p != NULL && it.lim - it.p > EVENT_RUN_MARGIN) {
            const uint8_t *q = it.p, *run_end = it.lim - EVENT_RUN_MARGIN, *p0 = it.p;
            while (q < run_end && q[0] == EVENT_KEY && q[1] < 0x80) {
                const uint8_t *ea = q + 2, *eb = ea + q[1];
                int64_t at = it.off + (q - p0);
                if (at >= from && at < to) {
                    Reader sub = {ea, eb};
                    if (table_event(t, &sub, it.lim, line_index, negative) < 0) goto fail;
                }
                q = eb;
            }
            it.off += q - p0;
            it.p = q;
        }
        tail = it.off >= to && to < end;
        int64_t key = 0;  /* (all set by iter_next where it returns 1) */
        uint64_t v = 0;
        const uint8_t *a = NULL, *b = NULL;
        if ((more = iter_next(&it, &field, &wire, &key, &v, &a, &b)) != 1) break;
        if (wire == 0 && (field == 1 || field == 3)) {
            if (field == 1) id = (int64_t)v;
            else timestamp = (int64_t)v;
        } else if (wire == 2 && (field == 2 || field == 11)) {
            int64_t *text = field == 2 ? name : display_name;
            text[0] = it.off - (b - a);
            text[1] = it.off;
        } else if (wire == 2 && field == 4) {
            if (key < from || key >= to) continue;  /* the other half's event */
            Reader sub = {a, b};
            if (table_event(t, &sub, it.lim, line_index, negative) < 0) goto fail;
        }
    }
    if (more < 0) goto fail;
    tail = to < end;
    /* Times are relative to the line's timestamp, which may come after its events. */
    int64_t *start = (int64_t *)t->ev_start.data;
    for (int64_t i = first; i < t->n_events; i++) {
        start[i] = (int64_t)((uint64_t)start[i] + (uint64_t)timestamp);
    }
    if (!row) return 0;
    PUT(&t->ln_plane, int32_t, plane_index);
    PUT(&t->ln_id, int64_t, id);
    /* The texts the line ends with (a repeated field's last value, as protobuf's). */
    int64_t *texts[2] = {name, display_name};
    for (int i = 0; i < 2; i++) {
        size_t n = (size_t)(texts[i][1] - texts[i][0]);
        const uint8_t *p = n ? source_need(&t->src, texts[i][0], n) : NULL;
        if (n && (p == NULL || buf_put(&t->ln_text, p, n) < 0)) goto fail;
        PUT(&t->ln_text_end, int64_t, (int64_t)t->ln_text.len);
    }
    return 0;
fail:
    if (tail) t->tail_error = 1;
    return -1;
}

/* The lines' names or display names (which = 0 or 1) as a list of str. */
static PyObject *
line_texts(const Table *t, int which)
{
    const int64_t *ends = (const int64_t *)t->ln_text_end.data;
    Py_ssize_t n = (Py_ssize_t)(t->ln_text_end.len / sizeof(int64_t) / 2);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = 2 * i + which > 0 ? ends[2 * i + which - 1] : 0, b = ends[2 * i + which];
        const char *text = t->ln_text.data ? t->ln_text.data + a : "";
        PyObject *str = PyUnicode_DecodeUTF8(text, b - a, "replace");
        if (str == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, str);
    }
    return out;
}

/* The planes' counts of negative durations as a list of int. */
static PyObject *
plane_negatives(const Table *t)
{
    const int64_t *counts = (const int64_t *)t->pl_negative.data;
    Py_ssize_t n = (Py_ssize_t)(t->pl_negative.len / sizeof(int64_t));
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *count = PyLong_FromLongLong(counts[i]);
        if (count == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, count);
    }
    return out;
}

static void
table_free(Table *t)
{
    Buf *bufs[] = {&t->ev_line, &t->ev_name, &t->ev_start, &t->ev_dur, &t->ln_plane,
                   &t->ln_id, &t->st_event, &t->st_name, &t->st_kind, &t->st_value,
                   &t->st_text_end, &t->blob, &t->ln_text, &t->ln_text_end,
                   &t->pl_negative};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        buf_free(bufs[i]);
    }
    for (int i = 0; i < N_TYPED; i++) {
        buf_free(&t->ty_rows[i]);
        buf_free(&t->ty_values[i]);
    }
}

/* ---- the walk, whole or in two halves ----------------------------------------------------
 *
 * The walk over the planes' lines, events and stats fills a Table's columns. It calls
 * nothing of Python's but to raise, so it runs without the GIL. A big file is walked on two
 * threads: its lines (in file order) are cut at one line's start into a first and a second
 * half, each walked into its own Table; the second Table's columns are then appended to the
 * first's, its rows, lines and texts counted on from the first's. Both halves walk the very
 * fields the one walk would, in the same order, and a half's first error is the one the
 * one walk would meet first in that half: the first half's error, else the second's, is the
 * one walk's error. */

/* Where the two halves meet: plane k's field has its key at plane_key and its body in
 * [body, body_end); its line at `line` (a key's offset in the body; its payload
 * [line_body, line_end)) starts the second half, or, where `event` is not 0, is cut in two
 * there: its events whose keys lie before that offset are the first half's. */
typedef struct {
    int32_t k;
    int64_t plane_key, body, body_end, line, line_body, line_end, event;
} Split;

/* The cut line at *p (the split's), its events before the cut (second: from it on). */
static int
walk_cut_line(Table *t, int64_t *p, int64_t pend, const Split *cut, int second,
              int64_t *negative)
{
    uint32_t field = 0, wire = 0;
    int64_t a, b;
    if (src_key(&t->src, p, pend, &field, &wire) < 0) return -1;
    if (field != 3 || wire != 2 || src_len(&t->src, p, pend, &a, &b) < 0 ||
        a != cut->line_body || b != cut->line_end) {
        return bad("the file changed while it was read");
    }
    return second ? table_line(t, a, b, cut->k, negative, cut->event, b, 0)
                  : table_line(t, a, b, cut->k, negative, a, cut->event, 1);
}

/* Plane `k`'s fields in [p, stop) (stop: its body's end, or where the second half starts),
 * its body ending at pend. With `cut` (a split inside this plane's line), the first half
 * ends (second: the second half begins) with its part of the cut line. */
static int
walk_plane(Table *t, Map *maps, Py_ssize_t n_maps, int32_t k, int64_t p, int64_t stop,
           int64_t pend, const Split *cut, int second)
{
    uint32_t field = 0, wire = 0;
    int64_t negative = 0;
    if (k >= n_maps) return bad("the file changed while it was read");
    t->ev_map = &maps[2 * k];
    t->st_map = &maps[2 * k + 1];
    if (cut != NULL && second && walk_cut_line(t, &p, pend, cut, 1, &negative) < 0) return -1;
    while (p < stop) {
        if (t->abandon != NULL && __atomic_load_n(t->abandon, __ATOMIC_RELAXED)) return -1;
        if (src_key(&t->src, &p, pend, &field, &wire) < 0) return -1;
        if (field == 3 && wire == 2) {
            int64_t a, b;
            if (src_len(&t->src, &p, pend, &a, &b) < 0 ||
                table_line(t, a, b, k, &negative, a, b, 1) < 0) return -1;
        } else if (src_skip(&t->src, &p, pend, wire) < 0) {
            return -1;
        }
    }
    if (p != stop) return bad("the file changed while it was read");
    if (cut != NULL && !second && walk_cut_line(t, &p, pend, cut, 0, &negative) < 0) return -1;
    PUT(&t->pl_negative, int64_t, negative);
    return 0;
fail:
    return -1;
}

/* The space's fields from *off to `stop` (a field's key, or the end), planes numbered on
 * from *k. */
static int
walk_space(Table *t, Map *maps, Py_ssize_t n_maps, int64_t *off, int64_t stop, int32_t *k)
{
    int64_t end = t->src.size;
    uint32_t field = 0, wire = 0;
    while (*off < stop) {
        if (src_key(&t->src, off, end, &field, &wire) < 0) return -1;
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(&t->src, off, end, &p, &pend) < 0) return -1;
            if (*k >= n_maps) return bad("the file changed while it was read");
            if (walk_plane(t, maps, n_maps, *k, p, pend, pend, NULL, 0) < 0) return -1;
            (*k)++;
        } else if (src_skip(&t->src, off, end, wire) < 0) {
            return -1;
        }
    }
    if (*off != stop) return bad("the file changed while it was read");
    return 0;
}

/* The whole file (split NULL), or the first or the second half of it. */
static int
table_walk(Table *t, Map *maps, Py_ssize_t n_maps, const Split *split, int second)
{
    int64_t off = 0, end = t->src.size;
    int32_t k = 0;
    if (split == NULL) {
        if (walk_space(t, maps, n_maps, &off, end, &k) < 0) return -1;
    } else if (!second) {
        /* The space up to plane k, then plane k's fields before the second half's line. */
        uint32_t field = 0, wire = 0;
        int64_t p, pend;
        if (walk_space(t, maps, n_maps, &off, split->plane_key, &k) < 0) return -1;
        if (src_key(&t->src, &off, end, &field, &wire) < 0) return -1;
        if (field != 1 || wire != 2 || k != split->k ||
            src_len(&t->src, &off, end, &p, &pend) < 0 || p != split->body ||
            pend != split->body_end) {
            return bad("the file changed while it was read");
        }
        return walk_plane(t, maps, n_maps, k, p, split->line, pend,
                          split->event ? split : NULL, 0);
    } else {
        /* Plane k's fields from that line on, then the space after plane k. */
        k = split->k;
        if (walk_plane(t, maps, n_maps, k, split->line, split->body_end, split->body_end,
                       split->event ? split : NULL, 1) < 0)
            return -1;
        k++;
        off = split->body_end;
        if (walk_space(t, maps, n_maps, &off, end, &k) < 0) return -1;
    }
    if (k != n_maps) return bad("the file changed while it was read");
    return 0;
}

/* Where to cut the file: inside the line that holds `near` (a file offset), else at the
 * start of the line nearest it, found by a walk over the space's and planes' keys only (the
 * lines are skipped unread). 1 with *out, 0 where the file has no line or the walk meets an
 * error (the one walk then meets it). */
static int
find_split(Source *src, int64_t near, Split *out)
{
    ErrSink sink = {ERR_NONE, NULL, 0};
    ErrSink *saved = err_sink;
    err_sink = &sink;  /* an error here is the one walk's to raise */
    int64_t off = 0, end = src->size, best = -1;
    int32_t k = 0;
    uint32_t field = 0, wire = 0;
    while (off < end) {
        int64_t key = off;
        if (src_key(src, &off, end, &field, &wire) < 0) goto none;
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(src, &off, end, &p, &pend) < 0) goto none;
            int64_t body = p;
            while (p < pend) {
                int64_t line = p;
                if (src_key(src, &p, pend, &field, &wire) < 0) goto none;
                if (field == 3 && wire == 2) {
                    int64_t a, b;
                    if (src_len(src, &p, pend, &a, &b) < 0) goto none;
                    int64_t dist = line > near ? line - near : near - line;
                    if (best < 0 || dist < best) {
                        best = dist;
                        *out = (Split){k, key, body, pend, line, a, b, 0};
                    }
                    if (line >= near) goto found;
                    if (near > a && near < b) {
                        /* `near` lies in this line: its events before `near` are the first
                         * half's, the others the second's (no walk over them here). */
                        *out = (Split){k, key, body, pend, line, a, b, near};
                        best = 0;
                        goto found;
                    }
                } else if (src_skip(src, &p, pend, wire) < 0) {
                    goto none;
                }
            }
            k++;
        } else if (src_skip(src, &off, end, wire) < 0) {
            goto none;
        }
    }
found:
    err_sink = saved;
    return best >= 0;
none:
    err_sink = saved;
    return 0;
}

/* Append b's bytes to a's (b is left empty). Where b is a big mapping (Linux), its pages are
 * moved behind a's whole pages rather than copied: a copy would write as many fresh pages,
 * which cost more than the walk that filled them; the bytes then only slide by the part of a
 * page that a's last page holds (memory already touched). */
static int
buf_append(Buf *a, Buf *b)
{
#if defined(__linux__)
    if (b->mapped && b->len >= BUF_MAP_BYTES) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t head = a->mapped ? a->len / page * page : 0;  /* a's pages left in place */
        size_t pad = a->len - head;                            /* a's bytes after them */
        size_t moved = (b->len + page - 1) / page * page;
        size_t cap = head + (pad + b->len + page - 1) / page * page;
        char *saved = NULL, *base;
        if (pad && a->mapped) {
            saved = PyMem_RawMalloc(pad);
            if (saved == NULL) {
                no_memory();
                return -1;
            }
            memcpy(saved, a->data + head, pad);
        }
        base = a->mapped ? mremap(a->data, a->cap, cap, MREMAP_MAYMOVE)
                         : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, 0);
        if (base == MAP_FAILED) {
            PyMem_RawFree(saved);
            no_memory();
            return -1;
        }
        if (a->mapped) {
            a->data = base;
            a->cap = cap;
        }
        if (mremap(b->data, b->cap, moved, MREMAP_MAYMOVE | MREMAP_FIXED, base + head) ==
            MAP_FAILED) {
            if (!a->mapped) munmap(base, cap);
            PyMem_RawFree(saved);
            no_memory();
            return -1;
        }
        if (pad) {
            memmove(base + head + pad, base + head, b->len);
            memcpy(base + head, a->mapped ? saved : a->data, pad);
        }
        PyMem_RawFree(saved);
        if (!a->mapped) {
            PyMem_RawFree(a->data);
            a->data = base;
            a->cap = cap;
            a->mapped = 1;
        }
        a->len += b->len;
        b->data = NULL;
        b->len = b->cap = 0;
        b->mapped = 0;
        return 0;
    }
#endif
    if (b->len && buf_put(a, b->data, b->len) < 0) return -1;
    buf_free(b);
    return 0;
}

/* Add `by` to the int32, int16 or int64 values of b from byte `from` on. */
static void
add_i32(Buf *b, size_t from, int32_t by)
{
    int32_t *v = (int32_t *)(b->data + from);
    size_t n = (b->len - from) / sizeof(int32_t);
    for (size_t i = 0; i < n; i++) v[i] += by;
}

static void
add_i16(Buf *b, size_t from, int16_t by)
{
    int16_t *v = (int16_t *)(b->data + from);
    size_t n = (b->len - from) / sizeof(int16_t);
    for (size_t i = 0; i < n; i++) v[i] = (int16_t)(v[i] + by);
}

static void
add_i64(Buf *b, size_t from, int64_t by)
{
    int64_t *v = (int64_t *)(b->data + from);
    size_t n = (b->len - from) / sizeof(int64_t);
    for (size_t i = 0; i < n; i++) v[i] += by;
}

/* One column's append: b's bytes after a's, then `by` added to the appended int16 (size 2),
 * int32 (size 4) or int64 (size 8) values (size 0: none). */
typedef struct {
    Buf *a, *b;
    int size;
    int64_t by;
} Part;

/* A share of the merge, on one thread: its parts in order, then (where `texts` is not 0) the
 * appended str/bytes stats' values, indices of texts, counted on by `texts`: st_kind and
 * st_value are in the same share. */
typedef struct {
    Part *parts;
    size_t n;
    Table *a;
    size_t st_from;  /* a's first appended stat */
    int64_t texts;
    ErrSink sink;
    int rc;
} Share;

static int
merge_share(Share *sh)
{
    for (size_t i = 0; i < sh->n; i++) {
        Part *c = &sh->parts[i];
        size_t from = c->a->len;
        if (buf_append(c->a, c->b) < 0) return -1;
        if (c->size == 2 && c->by) add_i16(c->a, from, (int16_t)c->by);
        if (c->size == 4 && c->by) add_i32(c->a, from, (int32_t)c->by);
        if (c->size == 8 && c->by) add_i64(c->a, from, c->by);
    }
    if (sh->texts) {
        const int8_t *kind = (const int8_t *)sh->a->st_kind.data;
        int64_t *value = (int64_t *)sh->a->st_value.data;
        size_t n = sh->a->st_value.len / sizeof(int64_t);
        for (size_t i = sh->st_from; i < n; i++) {
            if (kind[i] == KIND_STR || kind[i] == KIND_BYTES) value[i] += sh->texts;
        }
    }
    return 0;
}

static void *
merge_share_thread(void *arg)
{
    Share *sh = arg;
    err_sink = &sh->sink;
    sh->rc = merge_share(sh);
    err_sink = NULL;
    return NULL;
}

/* Append the second half's table b to the first's, a (b is emptied): its rows, lines, texts
 * and text offsets counted on from a's; plane k, which both walked part of, counted once.
 * The columns are appended in two shares, events' and stats', on two threads: the bytes
 * that slide behind the first half's (see buf_append) are as many as the second half's. The
 * caller's thread has an ErrSink. */
static int
table_merge(Table *a, Table *b)
{
    int64_t events = a->n_events;
    int32_t lines = (int32_t)(a->ln_plane.len / sizeof(int32_t));
    if (events + b->n_events > INT32_MAX) return bad("more than 2**31 events");
    /* The one walk's int16 lines overflow at the first event past them: here the second
     * half's last event (its lines count on from -1, the cut line's, in order). */
    if (!a->wide_lines && b->n_events &&
        lines + ((const int16_t *)b->ev_line.data)[b->n_events - 1] > INT16_MAX) {
        return lines_overflow();
    }
    /* Durations as wide as the wider half's (a half widens where one does not fit). */
    if ((a->wide_dur || b->wide_dur) &&
        (table_widen_durations(a) < 0 || table_widen_durations(b) < 0)) {
        return -1;
    }
    /* plane k: the first half's count last, the second's first */
    int64_t *neg_a = (int64_t *)a->pl_negative.data, *neg_b = (int64_t *)b->pl_negative.data;
    neg_a[a->pl_negative.len / sizeof(int64_t) - 1] += neg_b[0];
    if (buf_put(&a->pl_negative, neg_b + 1, b->pl_negative.len - sizeof(int64_t)) < 0)
        return -1;
    Part ev[6 + 2 * N_TYPED] = {
        {&a->ev_line, &b->ev_line, a->wide_lines ? 4 : 2, lines},
        {&a->ev_name, &b->ev_name, 0, 0},
        {&a->ev_start, &b->ev_start, 0, 0}, {&a->ev_dur, &b->ev_dur, 0, 0},
        {&a->ln_plane, &b->ln_plane, 0, 0}, {&a->ln_id, &b->ln_id, 0, 0},
    };
    for (int i = 0; i < N_TYPED; i++) {
        ev[6 + 2 * i] = (Part){&a->ty_rows[i], &b->ty_rows[i], 8, events};
        ev[7 + 2 * i] = (Part){&a->ty_values[i], &b->ty_values[i], 0, 0};
    }
    Part st[] = {
        {&a->st_event, &b->st_event, 4, events}, {&a->st_name, &b->st_name, 0, 0},
        {&a->st_kind, &b->st_kind, 0, 0}, {&a->st_value, &b->st_value, 0, 0},
        {&a->st_text_end, &b->st_text_end, 8, (int64_t)a->blob.len},
        {&a->blob, &b->blob, 0, 0}, {&a->ln_text, &b->ln_text, 0, 0},
        {&a->ln_text_end, &b->ln_text_end, 8, (int64_t)a->ln_text.len},
    };
    Share events_share = {ev, sizeof ev / sizeof ev[0], a, 0, 0, {ERR_NONE, NULL, 0}, 0};
    Share stats_share = {st, sizeof st / sizeof st[0], a, a->st_value.len / sizeof(int64_t),
                         a->n_texts, {ERR_NONE, NULL, 0}, 0};
    ErrSink *caller = err_sink;  /* the shares' own sinks while they run */
    pthread_t thread;
    int threaded = pthread_create(&thread, NULL, merge_share_thread, &events_share) == 0;
    if (!threaded) merge_share_thread(&events_share);
    merge_share_thread(&stats_share);
    err_sink = caller;
    if (threaded) pthread_join(thread, NULL);
    if (events_share.rc < 0 || stats_share.rc < 0) {
        *err_sink = events_share.rc < 0 ? events_share.sink : stats_share.sink;
        return -1;
    }
    a->n_events += b->n_events;
    a->n_texts += b->n_texts;
    a->unknown += b->unknown;
    return 0;
}

/* The second half's walk, on its own thread. */
typedef struct {
    Table *t;
    Map *maps;
    Py_ssize_t n_maps;
    const Split *split;
    ErrSink sink;
    int rc;
} Half;

static void *
walk_second_half(void *arg)
{
    Half *h = arg;
    err_sink = &h->sink;
    h->rc = table_walk(h->t, h->maps, h->n_maps, h->split, 1);
    err_sink = NULL;
    return NULL;
}

/* The walk on two threads where the file has a line to cut at and a thread starts: 1 (rc in
 * *rc, errors in *sink), else 0 (nothing done). Runs without the GIL. */
static int
table_walk_halves(Table *t, Map *maps, Py_ssize_t n_maps, int64_t near, int *rc,
                  ErrSink *sink, int64_t *cut_at)
{
    Split split;
    Source probe = t->src;
    probe.win = NULL;
    probe.win_cap = probe.win_len = 0;
    probe.win_off = -1;
    probe.window = 4096;  /* keys only: a line's key is all that is read of it */
    int found = find_split(&probe, near, &split);
    PyMem_RawFree(probe.win);
    if (!found) return 0;
    Table second;  /* its own source window and columns; the same stat slots */
    memset(&second, 0, sizeof second);
    second.src = t->src;
    second.src.win = NULL;
    second.src.win_cap = second.src.win_len = 0;
    second.src.win_off = -1;
    second.slot = t->slot;
    second.nslot = t->nslot;
    second.wide_lines = t->wide_lines;
    second.wide_names = t->wide_names;
    second.wide_stats = t->wide_stats;
    int abandon = 0;
    second.abandon = &abandon;
    Half h = {&second, maps, n_maps, &split, {ERR_NONE, NULL, 0}, 0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, walk_second_half, &h) != 0) return 0;
    *cut_at = split.event ? split.event : split.line;
    err_sink = sink;
    int first = table_walk(t, maps, n_maps, &split, 0);
    if (first < 0 && !t->tail_error) __atomic_store_n(&abandon, 1, __ATOMIC_RELAXED);
    pthread_join(thread, NULL);
    if (first < 0 && !(t->tail_error && h.rc < 0)) {
        *rc = -1;
    } else if (h.rc < 0) {
        /* The one walk would have counted past 2**31 events, or past int16 lines, at an
         * event the second half decoded before its error (its lines in order: the last
         * decoded has the highest index). */
        int32_t lines = (int32_t)(t->ln_plane.len / sizeof(int32_t));
        if (t->n_events + second.n_events > INT32_MAX) {
            bad("more than 2**31 events");
        } else if (!t->wide_lines && second.n_events &&
                   lines + ((const int16_t *)second.ev_line.data)[second.n_events - 1] >
                       INT16_MAX) {
            lines_overflow();
        } else {
            *sink = h.sink;
        }
        *rc = -1;
    } else {
        *rc = table_merge(t, &second);
    }
    err_sink = NULL;
    PyMem_RawFree(second.src.win);
    table_free(&second);
    return 1;
}

/* A file this big or bigger is walked on two threads (where `threads` allows): below it the
 * thread's start and the columns' append cost more than half the walk saves. */
#define SPLIT_BYTES ((long long)32 << 20)

/* decode_table(source, maps, slots[, (line, name, stat name code widths: 2 or 4 bytes)],
 * threads=2, split_bytes=SPLIT_BYTES, near=-1) -> dict of columns (see xspace_to_tables.py),
 * "cut_at": where the second half began, or -1, and "dur_bytes": 4 where every duration fits
 * int32 (ev_dur int32), else 8 (int64); OverflowError where lines of 2 bytes
 * were asked for and there are more than they hold.
 * maps: per plane (event_keys, event_codes, stat_keys, stat_codes), int64 keys sorted
 * (None for a plane without metadata)
 * ascending and int32 codes; slots: int8 per stat code, the typed slot or -1.
 * threads: 1 walks the file on the calling thread alone; 2 walks a file of split_bytes or
 * more in two halves cut at the line nearest the offset `near` (-1: the middle); the
 * columns are the same either way. */
static PyObject *
decode_table(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"source", "maps", "slots", "widths", "threads", "split_bytes",
                               "near", NULL};
    PyObject *source, *maps_arg, *slots_arg;
    int widths[3] = {4, 4, 4};
    int threads = 2;
    long long split_bytes = SPLIT_BYTES, near = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O|(iii)$iLL", keywords, &source,
                                     &PyList_Type, &maps_arg, &slots_arg, &widths[0],
                                     &widths[1], &widths[2], &threads, &split_bytes, &near)) {
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (widths[i] != 2 && widths[i] != 4) {
            PyErr_SetString(PyExc_ValueError, "code widths are 2 or 4 bytes");
            return NULL;
        }
    }
    Table t;
    memset(&t, 0, sizeof t);
    t.wide_lines = widths[0] == 4;
    t.wide_names = widths[1] == 4;
    t.wide_stats = widths[2] == 4;
    Py_buffer view, slots_view;
    view.obj = NULL;
    slots_view.obj = NULL;
    Py_ssize_t n_maps = PyList_GET_SIZE(maps_arg);
    Map *maps = PyMem_RawCalloc((size_t)(2 * n_maps + 1), sizeof(Map));
    Py_buffer *views = PyMem_RawCalloc((size_t)(4 * n_maps + 1), sizeof(Py_buffer));
    PyObject *result = NULL;
    if (maps == NULL || views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_maps; i++) {
        PyObject *item = PyList_GET_ITEM(maps_arg, i);
        /* None: a plane without metadata (its maps stay empty, as calloc left them): a file
         * of a million empty planes must not cost a million buffer views. */
        if (item == Py_None) continue;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_TypeError, "each map is (event keys, codes, stat keys, codes)");
            goto done;
        }
        if (map_init(&maps[2 * i], PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1),
                     &views[4 * i], &views[4 * i + 1]) < 0 ||
            map_init(&maps[2 * i + 1], PyTuple_GET_ITEM(item, 2), PyTuple_GET_ITEM(item, 3),
                     &views[4 * i + 2], &views[4 * i + 3]) < 0) {
            goto done;
        }
    }
    if (PyObject_GetBuffer(slots_arg, &slots_view, PyBUF_SIMPLE) < 0) goto done;
    t.slot = slots_view.buf;
    t.nslot = slots_view.len;
    if (source_open(&t.src, source, &view) < 0) goto done;
    /* The maps', slots' and source's buffers are held by their views until `done`. */
    int rc;
    ErrSink sink = {ERR_NONE, NULL, 0};
    int64_t cut_at = -1;
    t.src.nogil = 1;
    Py_BEGIN_ALLOW_THREADS
    if (threads < 2 || t.src.size < split_bytes ||
        !table_walk_halves(&t, maps, n_maps, near >= 0 ? near : t.src.size / 2, &rc, &sink,
                           &cut_at)) {
        rc = table_walk(&t, maps, n_maps, NULL, 0);
    }
    Py_END_ALLOW_THREADS
    t.src.nogil = 0;
    if (rc < 0) {
        sink_raise(&sink);
        goto done;
    }
    /* Hand the columns over; from here on nothing is freed twice. */
    PyObject *out = PyDict_New();
    if (out == NULL) goto done;
    PyObject *counts = Py_BuildValue("(LL)", (long long)t.n_events, (long long)t.unknown);
    int failed = counts == NULL || PyDict_SetItemString(out, "counts", counts) < 0;
    Py_XDECREF(counts);
    /* Where the second half began (a line's or an event's key), -1 for one walk. */
    PyObject *cut = PyLong_FromLongLong((long long)cut_at);
    failed = failed || cut == NULL || PyDict_SetItemString(out, "cut_at", cut) < 0;
    Py_XDECREF(cut);
    /* The durations' width in bytes: 4 (int32) where every one fits, else 8. */
    PyObject *dur_bytes = PyLong_FromLong(t.wide_dur ? 8 : 4);
    failed = failed || dur_bytes == NULL || PyDict_SetItemString(out, "dur_bytes", dur_bytes) < 0;
    Py_XDECREF(dur_bytes);
    PyObject *lists[3] = {line_texts(&t, 0), line_texts(&t, 1), plane_negatives(&t)};
    const char *list_names[3] = {"line_name", "line_display_name", "negative"};
    for (int i = 0; i < 3; i++) {
        failed = failed || lists[i] == NULL ||
            PyDict_SetItemString(out, list_names[i], lists[i]) < 0;
        Py_XDECREF(lists[i]);
    }
    failed = failed ||
        add_column(out, "ev_line", &t.ev_line) < 0 ||
        add_column(out, "ev_name", &t.ev_name) < 0 ||
        add_column(out, "ev_start", &t.ev_start) < 0 ||
        add_column(out, "ev_dur", &t.ev_dur) < 0 ||
        add_column(out, "ln_plane", &t.ln_plane) < 0 ||
        add_column(out, "ln_id", &t.ln_id) < 0 ||
        add_column(out, "st_event", &t.st_event) < 0 ||
        add_column(out, "st_name", &t.st_name) < 0 ||
        add_column(out, "st_kind", &t.st_kind) < 0 ||
        add_column(out, "st_value", &t.st_value) < 0 ||
        add_column(out, "st_text_end", &t.st_text_end) < 0 ||
        add_column(out, "blob", &t.blob) < 0;
    for (int i = 0; i < N_TYPED && !failed; i++) {
        char name[32];
        snprintf(name, sizeof name, "ty_rows%d", i);
        failed = add_column(out, name, &t.ty_rows[i]) < 0;
        snprintf(name, sizeof name, "ty_values%d", i);
        failed = failed || add_column(out, name, &t.ty_values[i]) < 0;
    }
    if (failed) {
        Py_DECREF(out);
        goto done;
    }
    result = out;
done:
    if (maps != NULL) {
        for (Py_ssize_t i = 0; i < 2 * n_maps; i++) PyMem_RawFree(maps[i].direct);
    }
    if (views != NULL) {
        for (Py_ssize_t i = 0; i < 4 * n_maps; i++) {
            if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
        }
    }
    PyMem_RawFree(maps);
    PyMem_RawFree(views);
    if (slots_view.obj != NULL) PyBuffer_Release(&slots_view);
    source_close(&t.src, &view);
    table_free(&t);
    return result;
}

/* ---- the skim: a big file's first picture, before its table -----------------------------
 *
 * Decoding a big file into its table takes seconds: at 1 GB most of it is writing columns as
 * long as the events, memory touched for the first time. The trace viewer's first window
 * needs far less: when each line's events start and end, how many of them start in each
 * span of the trace, and the few long enough to be drawn. `skim_lines` walks every event
 * once reading its times only (nothing kept per event); `skim_bins` walks them again, on two
 * threads, counting each line's events (and summing their durations) per span of the trace,
 * and keeping the events at least `wide_ns` long. Times are the table's: the line's
 * timestamp plus the offset, picoseconds rounded to ns as `ps_to_ns` does, negative
 * durations 0; an event's table row is its place in the file, as the decoder numbers it. */

/* One event's metadata id, offset and duration (ps) from its bytes [p, end), its other
 * fields skipped. With value_id >= 0, *sample says whether it is a counter's sample: a stat
 * of that metadata id with a number, and no duration (stats are read only while the
 * duration seen is none). 0, or -1 with the error raised (or sunk). */
static inline int
skim_event(const uint8_t *p, const uint8_t *end, int64_t value_id, int64_t *metadata,
           int64_t *offset, int64_t *duration, int *sample)
{
    int rc;
    *metadata = *offset = *duration = 0;
    *sample = 0;
    while (p < end) {
        uint64_t key, v;
        if ((rc = fast_varint(&p, end, &key)) != 0) goto cut;
        uint32_t field = (uint32_t)(key >> 3), wire = (uint32_t)(key & 7);
        if (wire == 0) {
            if ((rc = fast_varint(&p, end, &v)) != 0) goto cut;
            if (field == 1) *metadata = (int64_t)v;
            else if (field == 2) *offset = (int64_t)v;
            else if (field == 3) *duration = (int64_t)v;
        } else if (wire == 2) {
            if ((rc = fast_varint(&p, end, &v)) != 0) goto cut;
            if (v > (uint64_t)(end - p)) return bad("length past the end of the data");
            /* The stats (4) come after the metadata id, offset and duration (1 to 3) where
             * the fields are in order, as every protobuf writer puts them: the rest of the
             * event is not needed unless it may be a counter's sample. (A writer that puts
             * them after the stats gets a skim without them: its table is exact.) */
            if (field == 4 && (value_id < 0 || *duration > 0)) break;
            if (field == 4 && value_id >= 0 && *duration <= 0 && !*sample) {
                Reader stat = {p, p + v};
                uint32_t f2, w2;
                int more2, number = 0;
                uint64_t id = 0;
                while ((more2 = read_key(&stat, &f2, &w2)) == 1) {
                    if (f2 == 1 && w2 == 0) {
                        if (read_varint(&stat, &id) < 0) return -1;
                        continue;
                    }
                    if (f2 >= 2 && f2 <= 7) number = f2 <= 4;  /* the value's oneof */
                    if (skip_field(&stat, w2) < 0) return -1;
                }
                if (more2 < 0) return -1;
                *sample = number && (int64_t)id == value_id;
            }
            p += v;
        } else if (wire == 1 || wire == 5) {
            size_t k = wire == 1 ? 8 : 4;
            if ((size_t)(end - p) < k) return bad("truncated fixed field");
            p += k;
        } else {
            return bad("unsupported wire type");
        }
    }
    if (ps_to_ns(*duration) > 0) *sample = 0;
    return 0;
cut:
    return rc < 0 ? -1 : bad("truncated varint");
}

/* skim_event for an event laid out as protobuf writers lay it out, QUICK_MARGIN bytes readable
 * past its end: its metadata id, offset and duration (each at most once, in that order), then
 * nothing or its stats, read a word a varint. 1 with skim_event's answers (no counter's
 * sample among them); 0 where the event is otherwise, may be a counter's sample, or is
 * wrong, for skim_event to read (and say what is wrong). */
static ALWAYS_INLINE int
skim_event_ordered(const uint8_t *p, const uint8_t *end, int64_t value_id, int64_t *metadata,
                   int64_t *offset, int64_t *duration)
{
    uint64_t v[3] = {0, 0, 0}, n;
    p = event_head(p, end, v);
    if (p < end) {
        /* Stats, whose length is checked as skim_event does; the rest unread unless the
         * event may be a counter's sample. (Anything else, a field event_head left included:
         * skim_event.) */
        if (p[0] != 0x22 || (value_id >= 0 && (int64_t)v[2] <= 0)) return 0;
        int k = quick_varint(p + 1, &n);
        if (k == 0 || k > end - (p + 1) || n > (uint64_t)(end - (p + 1 + k))) return 0;
    }
    *metadata = (int64_t)v[0];
    *offset = (int64_t)v[1];
    *duration = (int64_t)v[2];
    return 1;
}

/* An event's fields (as skim_event's), read the quick way (skim_event_ordered) where its
 * layout and the QUICK_MARGIN bytes after it (readable up to lim) allow. */
static ALWAYS_INLINE int
read_event(const uint8_t *a, const uint8_t *b, const uint8_t *lim, int64_t value_id,
           int64_t *metadata, int64_t *offset, int64_t *duration, int *sample)
{
    if (lim - b >= QUICK_MARGIN &&
        skim_event_ordered(a, b, value_id, metadata, offset, duration)) {
        *sample = 0;
        return 0;
    }
    return skim_event(a, b, value_id, metadata, offset, duration, sample);
}

/* The lines of the file, found by a walk over the planes' keys (their events unread). */
typedef struct {
    Buf plane, from, to;  /* per line: int32 plane index; int64 body [from, to) */
} SkimPlan;

static int
skim_plan(Source *src, SkimPlan *out)
{
    int64_t off = 0, end = src->size;
    int32_t k = 0;
    uint32_t field, wire;
    int more;
    while ((more = src_key(src, &off, end, &field, &wire)) == 1) {
        if (field == 1 && wire == 2) {
            int64_t p, pend;
            if (src_len(src, &off, end, &p, &pend) < 0) return -1;
            int more2;
            while ((more2 = src_key(src, &p, pend, &field, &wire)) == 1) {
                if (field == 3 && wire == 2) {
                    int64_t a, b;
                    if (src_len(src, &p, pend, &a, &b) < 0) return -1;
                    PUT(&out->plane, int32_t, k);
                    PUT(&out->from, int64_t, a);
                    PUT(&out->to, int64_t, b);
                } else if (src_skip(src, &p, pend, wire) < 0) {
                    return -1;
                }
            }
            if (more2 < 0) return -1;
            if (k == INT32_MAX) return bad("more than 2**31 planes");
            k++;
        } else if (src_skip(src, &off, end, wire) < 0) {
            return -1;
        }
    }
    return more;
fail:
    return -1;
}

/* Events counted per (row, span) on a grid of spans 2**shift ns long, aligned to time 0:
 * span i of the grid is absolute span b0 + i. It starts at the first event's span and, when
 * an event falls outside its `bins` spans, takes spans twice as long (or 4, 8, ...) so that
 * every start seen fits: spans merge exactly, as they are aligned. */
typedef struct {
    int shift;                 /* -1 before the first event */
    int64_t b0, lo, hi;        /* lo, hi: the earliest and latest start seen (ns) */
    int64_t bins, rows;
    int64_t *count, *covered;  /* rows × bins */
    int64_t *spare;            /* bins: a row's spans while they merge */
    uint8_t *used;             /* rows: whether a line of the row was walked (its counts moved) */
} Grid;

static inline int64_t
span_of(int64_t t, int shift)
{
    return t >> shift;  /* floor division by 2**shift (an arithmetic shift) */
}

/* The shortest spans, from 2**shift ns up, on which starts lo to hi fit in `bins`. */
static int
grid_shift_for(int shift, int64_t lo, int64_t hi, int64_t bins)
{
    /* hi >= lo: the difference fits in 64 unsigned bits, whatever the times. */
    while (shift < 62 &&
           (uint64_t)span_of(hi, shift) - (uint64_t)span_of(lo, shift) >= (uint64_t)bins)
        shift++;
    return shift;
}

/* The counts moved onto spans of 2**shift ns (no shorter than now) from absolute span b0. */
static void
grid_to(Grid *g, int shift, int64_t b0)
{
    if (shift == g->shift && b0 == g->b0) return;
    int up = shift - g->shift;
    for (int64_t r = 0; r < 2 * g->rows; r++) {
        if (!g->used[r % g->rows]) continue;  /* (most rows' lines come later, or never) */
        int64_t *x = (r < g->rows ? g->count : g->covered) + (r % g->rows) * g->bins;
        int any = 0;
        for (int64_t i = 0; i < g->bins && !any; i++) any = x[i] != 0;
        if (!any) continue;
        memset(g->spare, 0, (size_t)g->bins * sizeof(int64_t));
        for (int64_t i = 0; i < g->bins; i++) {
            if (!x[i]) continue;
            /* (In unsigned arithmetic: no overflow, whatever an absurd file's times.) */
            int64_t j = (int64_t)((uint64_t)span_of((int64_t)((uint64_t)g->b0 + (uint64_t)i), up)
                                  - (uint64_t)b0);
            g->spare[j < 0 ? 0 : j >= g->bins ? g->bins - 1 : j] += x[i];
        }
        memcpy(x, g->spare, (size_t)g->bins * sizeof(int64_t));
    }
    g->shift = shift;
    g->b0 = b0;
}

/* Room for start t: the grid moved, or its spans made longer, where t falls outside. */
static void
grid_fit(Grid *g, int64_t t)
{
    if (g->shift < 0) {
        /* The first start: 1 ns spans, room on both sides of it. */
        g->shift = 0;
        g->lo = g->hi = t;
        g->b0 = t >= INT64_MIN + g->bins ? t - g->bins / 2 : t;
        if (t > INT64_MAX - g->bins) g->b0 = INT64_MAX - g->bins;  /* its spans inside int64 */
        return;
    }
    int64_t lo = t < g->lo ? t : g->lo, hi = t > g->hi ? t : g->hi;
    int shift = grid_shift_for(g->shift, lo, hi, g->bins);
    int64_t b0 = g->b0;
    if (shift != g->shift || span_of(lo, shift) < b0 ||
        (uint64_t)span_of(hi, shift) - (uint64_t)b0 >= (uint64_t)g->bins)
        b0 = span_of(lo, shift);
    grid_to(g, shift, b0);
    g->lo = lo;
    g->hi = hi;
}

/* b's counts added to a's, both moved onto the spans that hold both. */
static void
grid_merge(Grid *a, Grid *b)
{
    if (b->shift < 0) return;
    if (a->shift < 0) {
        Grid t = *a;
        *a = *b;
        *b = t;
        return;
    }
    int64_t lo = a->lo < b->lo ? a->lo : b->lo, hi = a->hi > b->hi ? a->hi : b->hi;
    int shift = grid_shift_for(a->shift > b->shift ? a->shift : b->shift, lo, hi, a->bins);
    int64_t b0 = span_of(lo, shift);
    grid_to(a, shift, b0);
    grid_to(b, shift, b0);
    for (int64_t c = 0; c < a->rows * a->bins; c++) {
        a->count[c] += b->count[c];
        a->covered[c] += b->covered[c];
    }
    for (int64_t r = 0; r < a->rows; r++) a->used[r] |= b->used[r];
    a->lo = lo;
    a->hi = hi;
}

/* A drawn line's events in blocks of up to SKIM_BLOCK events, in file order, each recorded as
 * (line, file offset of its first event's key, offset past its last event, index of its first
 * event in the line's part, events, earliest start, latest end as laid out): a window of the
 * trace is then read from the blocks whose times overlap it (`skim_window`), not the file. */
#define SKIM_BLOCK 4096
/* Bytes the skim's walks read at a time (its pass and a window's blocks, some 100 kB each):
 * 4 MB reads cost the pass a third more in the kernel's copy, and a block 4 MB. */
#define SKIM_WINDOW ((size_t)256 << 10)
#define SKIM_BLOCK_FIELDS 7
/* Events open at once that a line's depth counts up to (deeper: unknown, -1): the ends are
 * kept sorted, so that a nested event's end goes on top at once, and one that overlaps
 * without nesting moves at most this many. */
#define SKIM_DEPTH 256

/* What one thread of the skim walks and fills. */
typedef struct {
    Source src;
    const int64_t *from, *to;
    const int32_t *plane, *row;  /* per line: its plane, its row of counts (-1: not drawn) */
    const int64_t *value_ids;    /* per plane */
    int64_t n_planes;
    int64_t lo, hi;              /* its lines: lo to hi (exclusive) */
    int64_t first_from;          /* its first line's events: keys from here on */
    int64_t last_to;             /* its last line's events: keys before here */
    int64_t *id, *timestamp, *events, *samples, *first, *last;  /* per line */
    int64_t *depth;              /* per line: most of its events open at once; -1: unknown */
    int64_t open[SKIM_DEPTH];    /* the ends of the line's events open now, latest first */
    int disordered;              /* a line's timestamp came after its events */
    Buf text, text_end;          /* per line of its own: name, display name */
    Grid grid;
    int64_t wide_floor;          /* raised while too many long events are kept */
    size_t max_wide;
    Buf wide;                    /* per long event: line, index in its part, start, dur, id */
    int64_t n_wide;
    Buf blocks;                  /* per block of a drawn line's events: SKIM_BLOCK_FIELDS */
    ErrSink sink;
    int rc;
} Skimmer;

/* The long events kept are those at least a 64th of a span long (a zoom to a few spans, too
 * wide to read from the blocks, draws every event a pixel wide from them), or longer while
 * there would be more than max_wide. */
#define SKIM_WIDE_SHIFT 6

static int64_t
wide_least(const Skimmer *h)
{
    int shift = h->grid.shift - SKIM_WIDE_SHIFT;
    int64_t least = shift <= 0 ? 1 : (int64_t)1 << shift;
    return least > h->wide_floor ? least : h->wide_floor;
}

/* Keep only the long events at least wide_least long. */
static void
skim_narrow(Skimmer *h)
{
    int64_t *w = (int64_t *)h->wide.data, kept = 0, least = wide_least(h);
    for (int64_t i = 0; i < h->n_wide; i++) {
        if (w[5 * i + 3] >= least) {
            memmove(&w[5 * kept], &w[5 * i], 5 * sizeof(int64_t));
            kept++;
        }
    }
    h->n_wide = kept;
    h->wide.len = (size_t)kept * 5 * sizeof(int64_t);
}

/* Too many long events kept: the floor raised (a power of two, at least doubled) until at
 * most half of max_wide are left, and the others let go. Raising it only as far as twice
 * would narrow the whole buffer again and again, events at the trace's start (before the
 * grid's spans have grown) being nearly all long enough. */
static void
skim_raise_floor(Skimmer *h)
{
    const int64_t *w = (const int64_t *)h->wide.data;
    int64_t by_bits[65] = {0}, least = wide_least(h);
    for (int64_t i = 0; i < h->n_wide; i++) {
        if (w[5 * i + 3] >= least) by_bits[bit_length((uint64_t)w[5 * i + 3])]++;
    }
    /* At least 2^k long: bit length k + 1 or more. */
    int k = bit_length((uint64_t)least);  /* least = 2^(k - 1): at least twice that */
    if (k >= 62) {
        h->wide_floor = INT64_MAX;
        skim_narrow(h);
        return;
    }
    int64_t kept = 0;
    for (int b = k + 1; b <= 64; b++) kept += by_bits[b];
    while (k < 62 && kept > (int64_t)(h->max_wide / 2)) {
        kept -= by_bits[k + 1];
        k++;
    }
    h->wide_floor = k >= 62 && kept > (int64_t)(h->max_wide / 2) ? INT64_MAX
                    : (int64_t)1 << k;
    skim_narrow(h);
}

/* One line's walk (skim_line): what its events add up to so far, and the grid's state that
 * every event reads, kept here (a store to the counts could alias the Skimmer's fields, and
 * the compiler would read them again for each event). */
typedef struct {
    int64_t j, row, ts;
    int64_t events, samples, first, last;
    int64_t prev, most, n_open;  /* the events open at once, while they come in start order */
    int in_order;
    int64_t block[SKIM_BLOCK_FIELDS];  /* the block being filled */
    int shift;                         /* the grid: spans of 2**shift ns from span b0 */
    int64_t b0, lo, hi, bins;          /* starts lo to hi fit in it (none before the first) */
    int64_t least;                     /* wide_least */
    int64_t *count, *covered;          /* the line's row of the grid */
} LineWalk;

/* The grid's state read again (at a line's start, and where an event moved the grid). */
static void
walk_grid(Skimmer *h, LineWalk *w)
{
    const Grid *g = &h->grid;
    w->shift = g->shift;
    w->b0 = g->b0;
    w->lo = g->shift < 0 ? INT64_MAX : g->lo;  /* (no start fits before the first) */
    w->hi = g->shift < 0 ? INT64_MIN : g->hi;
    w->bins = g->bins;
    w->least = wide_least(h);
    w->count = w->row >= 0 ? g->count + w->row * g->bins : NULL;
    w->covered = w->row >= 0 ? g->covered + w->row * g->bins : NULL;
}

/* One event of the line (its key at file offset `key`, the next field at `next`) added to
 * the walk. 0, or -1 with the error raised (or sunk). */
static ALWAYS_INLINE int
walk_event(Skimmer *h, LineWalk *w, int64_t key, int64_t next, int64_t metadata,
           int64_t offset, int64_t duration, int sample)
{
    int64_t start = (int64_t)((uint64_t)w->ts + (uint64_t)ps_to_ns(offset));
    int64_t dur = ps_to_ns(duration);
    if (dur < 0) dur = 0;
    int64_t stop = (int64_t)((uint64_t)start + (uint64_t)(dur > 1 ? dur : 1));
    if (start < w->first) w->first = start;
    if (stop > w->last) w->last = stop;
    w->samples += sample;
    if (w->row < 0) {
        w->events++;
        return 0;
    }
    if (start < w->lo || start > w->hi) {
        grid_fit(&h->grid, start);
        walk_grid(h, w);
    }
    /* Inside the grid, as it was fitted to this start; kept there whatever the times (absurd
     * ones near the ends of int64 included). */
    int64_t i = (int64_t)((uint64_t)span_of(start, w->shift) - (uint64_t)w->b0);
    if (i < 0 || i >= w->bins) i = i < 0 ? 0 : w->bins - 1;
    w->count[i]++;
    w->covered[i] += dur;
    /* (Wider spans raise wide_least: the long events kept that are now too short are let
     * go at the next raise of the floor, or at the end, not each time.) */
    if (dur >= w->least) {
        int64_t rec[5] = {w->j, w->events, start, dur, metadata};
        if (buf_put(&h->wide, rec, sizeof rec) < 0) return -1;
        if ((size_t)++h->n_wide > h->max_wide) {
            skim_raise_floor(h);
            w->least = wide_least(h);
        }
    }
    if (w->in_order) {
        int64_t *open = h->open;
        while (w->n_open && open[w->n_open - 1] <= start) w->n_open--;  /* ended: earliest */
        if (start < w->prev || w->n_open == SKIM_DEPTH) {
            w->in_order = 0;
        } else {
            w->prev = start;
            int64_t k = w->n_open++;
            while (k > 0 && open[k - 1] < stop) {  /* (a nested event's: none to move) */
                open[k] = open[k - 1];
                k--;
            }
            open[k] = stop;
            if (w->n_open > w->most) w->most = w->n_open;
        }
    }
    int64_t *block = w->block;
    if (block[4] == 0) {
        block[1] = key;
        block[3] = w->events;
        block[5] = start;
        block[6] = stop;
    }
    if (start < block[5]) block[5] = start;
    if (stop > block[6]) block[6] = stop;
    block[2] = next;
    if (++block[4] == SKIM_BLOCK) {
        if (buf_put(&h->blocks, block, SKIM_BLOCK_FIELDS * sizeof(int64_t)) < 0) return -1;
        block[4] = 0;
    }
    w->events++;
    return 0;
}

/* Line j's fields, and its events whose keys lie in [from, to). Of a drawn line whose events
 * come in start order, the most of them open at once (the rows the trace viewer's layout
 * takes for events that overlap or nest, in the usual case), up to SKIM_DEPTH. */
static int
skim_line(Skimmer *h, int64_t j, int64_t from, int64_t to, int texts)
{
    int32_t k = h->plane[j];
    int64_t value_id = k < h->n_planes ? h->value_ids[k] : -1;
    int64_t id = 0;
    int64_t text[2][2] = {{0, 0}, {0, 0}};
    int seen_events = 0;
    uint32_t field, wire;
    int64_t key;
    uint64_t v;
    const uint8_t *a, *b;
    FieldIter it = {&h->src, h->from[j], h->to[j], NULL, NULL};
    LineWalk w;
    memset(&w, 0, sizeof w);
    w.j = j;
    w.row = h->row[j];
    w.first = INT64_MAX;
    w.last = INT64_MIN;
    w.prev = INT64_MIN;
    w.in_order = 1;
    w.block[0] = j;
    if (w.row >= 0) h->grid.used[w.row] = 1;
    walk_grid(h, &w);
    int more;
    for (;;) {
        /* A run of events in the window, read without iter_next's general case: each one a
         * key EVENT_KEY and a one-byte length, at least EVENT_RUN_MARGIN bytes before the
         * window's end (which is at most the line's). */
        if (it.p != NULL && it.lim - it.p > EVENT_RUN_MARGIN) {
            const uint8_t *q = it.p, *run_end = it.lim - EVENT_RUN_MARGIN;
            const uint8_t *p0 = it.p;  /* at file offset it.off */
            if (q < run_end && q[0] == EVENT_KEY) seen_events = 1;
            while (q < run_end && q[0] == EVENT_KEY && q[1] < 0x80) {
                const uint8_t *ea = q + 2, *eb = ea + q[1];
                int64_t at = it.off + (q - p0);
                if (at >= from && at < to) {
                    int64_t metadata, offset, duration;
                    int sample;
                    if (read_event(ea, eb, it.lim, value_id, &metadata, &offset, &duration,
                                   &sample) < 0)
                        return -1;
                    if (walk_event(h, &w, at, it.off + (eb - p0), metadata, offset, duration,
                                   sample) < 0)
                        return -1;
                }
                q = eb;
            }
            it.off += q - it.p;
            it.p = q;
        }
        if ((more = iter_next(&it, &field, &wire, &key, &v, &a, &b)) != 1) break;
        if (wire == 0 && (field == 1 || field == 3)) {
            if (field == 1) {
                id = (int64_t)v;
            } else {
                w.ts = (int64_t)v;
                if (seen_events) h->disordered = 1;
            }
            continue;
        }
        if (wire == 2 && (field == 2 || field == 11)) {
            text[field == 2 ? 0 : 1][0] = it.off - (b - a);
            text[field == 2 ? 0 : 1][1] = it.off;
            continue;
        }
        if (wire != 2 || field != 4) continue;
        seen_events = 1;
        if (key < from || key >= to) continue;
        int64_t metadata, offset, duration;
        int sample;
        if (read_event(a, b, it.lim, value_id, &metadata, &offset, &duration, &sample) < 0)
            return -1;
        if (walk_event(h, &w, key, it.off, metadata, offset, duration, sample) < 0) return -1;
    }
    if (more < 0) return -1;
    if (w.block[4] > 0 && buf_put(&h->blocks, w.block, sizeof w.block) < 0) return -1;
    if (!w.in_order) h->depth[j] = -1;
    else if (h->depth[j] >= 0 && w.most > h->depth[j]) h->depth[j] = w.most;
    h->id[j] = id;
    h->timestamp[j] = w.ts;
    h->events[j] += w.events;
    h->samples[j] += w.samples;
    if (w.first < h->first[j]) h->first[j] = w.first;
    if (w.last > h->last[j]) h->last[j] = w.last;
    if (texts) {
        for (int i = 0; i < 2; i++) {
            size_t n = (size_t)(text[i][1] - text[i][0]);
            const uint8_t *p = n ? source_need(&h->src, text[i][0], n) : NULL;
            if (n && (p == NULL || buf_put(&h->text, p, n) < 0)) goto fail;
            PUT(&h->text_end, int64_t, (int64_t)h->text.len);
        }
    }
    return 0;
fail:
    return -1;
}

static void *
skim_thread(void *arg)
{
    Skimmer *h = arg;
    err_sink = &h->sink;
    h->rc = 0;
    for (int64_t j = h->lo; j < h->hi && h->rc == 0; j++) {
        int64_t from = j == h->lo ? h->first_from : INT64_MIN;
        int64_t to = j == h->hi - 1 ? h->last_to : INT64_MAX;
        h->rc = skim_line(h, j, from, to, from == INT64_MIN);
    }
    err_sink = NULL;
    return NULL;
}

static PyObject *
bytes_of(const Buf *b)
{
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* skim_plan(source) -> (plane, from, to): per line of the file, in file order, its plane's
 * index (int32 bytes) and its bytes [from, to) (int64 bytes). */
static PyObject *
skim_plan_py(PyObject *module, PyObject *arg)
{
    Source s;
    Py_buffer view;
    SkimPlan out;
    memset(&out, 0, sizeof out);
    PyObject *result = NULL;
    if (source_open(&s, arg, &view) < 0) return NULL;
    ErrSink sink = {ERR_NONE, NULL, 0};
    int rc;
    s.window = KEY_WINDOW;
    s.nogil = 1;
    Py_BEGIN_ALLOW_THREADS
    err_sink = &sink;
    rc = skim_plan(&s, &out);
    err_sink = NULL;
    Py_END_ALLOW_THREADS
    s.nogil = 0;
    if (rc < 0) {
        sink_raise(&sink);
    } else {
        PyObject *a = bytes_of(&out.plane), *b = bytes_of(&out.from), *c = bytes_of(&out.to);
        if (a != NULL && b != NULL && c != NULL) result = PyTuple_Pack(3, a, b, c);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
    }
    buf_free(&out.plane);
    buf_free(&out.from);
    buf_free(&out.to);
    source_close(&s, &view);
    return result;
}

static int
skimmer_init(Skimmer *h, const Source *s, int64_t n, int64_t rows, int64_t bins)
{
    h->src = *s;
    h->src.nogil = 1;
    h->src.win = NULL;
    h->src.win_cap = h->src.win_len = 0;
    h->src.win_off = -1;
    h->src.window = SKIM_WINDOW;
    h->grid.shift = -1;
    h->grid.rows = rows;
    h->grid.bins = bins;
    h->grid.count = PyMem_RawCalloc((size_t)(rows * bins + 1), sizeof(int64_t));
    h->grid.covered = PyMem_RawCalloc((size_t)(rows * bins + 1), sizeof(int64_t));
    h->grid.spare = PyMem_RawCalloc((size_t)bins + 1, sizeof(int64_t));
    h->grid.used = PyMem_RawCalloc((size_t)rows + 1, 1);
    int64_t **cols[7] = {&h->id, &h->timestamp, &h->events, &h->samples, &h->first, &h->last,
                         &h->depth};
    int ok = h->grid.count != NULL && h->grid.covered != NULL && h->grid.spare != NULL &&
             h->grid.used != NULL;
    for (int i = 0; i < 7; i++) {
        *cols[i] = PyMem_RawCalloc((size_t)n + 1, sizeof(int64_t));
        ok = ok && *cols[i] != NULL;
    }
    if (!ok) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t j = 0; j < n; j++) {
        h->first[j] = INT64_MAX;
        h->last[j] = INT64_MIN;
    }
    return 0;
}

static void
skimmer_free(Skimmer *h)
{
    PyMem_RawFree(h->grid.count);
    PyMem_RawFree(h->grid.covered);
    PyMem_RawFree(h->grid.spare);
    PyMem_RawFree(h->grid.used);
    int64_t *cols[7] = {h->id, h->timestamp, h->events, h->samples, h->first, h->last,
                        h->depth};
    for (int i = 0; i < 7; i++) PyMem_RawFree(cols[i]);
    PyMem_RawFree(h->src.win);
    buf_free(&h->text);
    buf_free(&h->text_end);
    buf_free(&h->wide);
    buf_free(&h->blocks);
}

static PyObject *
int64_bytes(const int64_t *x, int64_t n)
{
    return PyBytes_FromStringAndSize((const char *)x, (Py_ssize_t)(n * 8));
}

/* skim(source, plane, from, to, row, value_ids, bins, max_wide, threads) -> dict.
 * Per line (skim_plan's plane, from, to; int32 row: its row of counts, -1 for none; per
 * plane, value_ids: the metadata id of its "value" stat, or -1): "id", "timestamp",
 * "events", "samples" (events that are counter samples: a number in the value stat, no
 * duration), "first", "last" (the earliest start and the latest end as laid out, at least
 * 1 ns long; INT64_MAX and INT64_MIN without events), "text", "text_end" (the name and the
 * display name, two a line, one after another); "shift", "b0": the grid (spans of
 * 2**shift ns from absolute span b0) on which "count" and "covered" (rows × bins) count the
 * events starting in each span and sum their durations; "wide": int64 records (line, index
 * in the line, start, duration, metadata id) of events at least "wide_ns" long, every such
 * event among them (and some shorter: the caller drops those). "disordered": 1 where a
 * line's timestamp came after its events (the times are then wrong: the caller reads the
 * table instead). "blocks": int64 records of SKIM_BLOCK_FIELDS (see SKIM_BLOCK) of the
 * drawn lines' events; "depth": per drawn line whose events come in start order, the most
 * of them open at once (the line cut between two threads: the more of its halves'), -1 for
 * one whose events do not or where more than SKIM_DEPTH are (0 for the other lines).
 * Walked on two threads (threads=2) cut at the middle of the lines' bytes where they are
 * split_bytes (4 MB) or more. */
static PyObject *
skim_py(PyObject *module, PyObject *args)
{
    PyObject *source, *objs[5];
    long long bins, max_wide, split_bytes = 4 << 20;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOOOOLLi|L", &source, &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &bins, &max_wide, &threads, &split_bytes)) {
        return NULL;
    }
    if (bins < 16 || bins > (1 << 24) || max_wide < 1) {
        PyErr_SetString(PyExc_ValueError, "skim: bins 16 to 2**24, max_wide >= 1");
        return NULL;
    }
    Py_buffer views[5];
    for (int i = 0; i < 5; i++) views[i].obj = NULL;
    PyObject *result = NULL;
    Py_buffer src_view;
    src_view.obj = NULL;
    Skimmer h[2];
    memset(h, 0, sizeof h);
    Source s;
    memset(&s, 0, sizeof s);
    int opened = 0;
    Py_ssize_t n = 0;
    if (PyObject_GetBuffer(objs[0], &views[0], PyBUF_SIMPLE) < 0) goto done;
    n = views[0].len / 4;
    const Py_ssize_t sizes[5] = {4, 8, 8, 4, 8};
    for (int i = 1; i < 5; i++) {
        if (PyObject_GetBuffer(objs[i], &views[i], PyBUF_SIMPLE) < 0) goto done;
        if (i < 4 && views[i].len != sizes[i] * n) {
            PyErr_SetString(PyExc_ValueError, "skim: the lines' columns differ in length");
            goto done;
        }
    }
    const int32_t *plane = views[0].buf, *row = views[3].buf;
    const int64_t *from = views[1].buf, *to = views[2].buf;
    int64_t rows = 0, total = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (row[j] >= rows) rows = (int64_t)row[j] + 1;
        if (from[j] < 0 || to[j] < from[j]) {
            PyErr_SetString(PyExc_ValueError, "skim: a line's bytes out of order");
            goto done;
        }
        total += to[j] - from[j];
    }
    if (rows * bins > ((int64_t)1 << 26)) {
        PyErr_SetString(PyExc_ValueError, "skim: too many rows × bins");
        goto done;
    }
    if (source_open(&s, source, &src_view) < 0) goto done;
    opened = 1;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (to[j] > s.size) {
            PyErr_SetString(PyExc_ValueError, "skim: a line past the end of the file");
            goto done;
        }
    }
    /* Two halves of the lines' bytes: the line holding the middle is cut there. */
    int n_half = threads >= 2 && total >= split_bytes && total >= 2 ? 2 : 1;
    int64_t cut_line = 0, cut_at = INT64_MAX;
    if (n_half == 2) {
        int64_t seen = 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            if (seen + (to[j] - from[j]) >= total / 2) {
                cut_line = j;
                cut_at = from[j] + (total / 2 - seen);
                break;
            }
            seen += to[j] - from[j];
        }
    }
    for (int i = 0; i < n_half; i++) {
        if (skimmer_init(&h[i], &s, n, rows, bins) < 0) goto done;
        h[i].from = from;
        h[i].to = to;
        h[i].plane = plane;
        h[i].row = row;
        h[i].value_ids = views[4].buf;
        h[i].n_planes = views[4].len / 8;
        h[i].max_wide = (size_t)max_wide;
        h[i].wide_floor = 1;
    }
    if (n_half == 1) {
        h[0].lo = 0; h[0].hi = n; h[0].first_from = INT64_MIN; h[0].last_to = INT64_MAX;
    } else {
        h[0].lo = 0; h[0].hi = cut_line + 1; h[0].first_from = INT64_MIN; h[0].last_to = cut_at;
        h[1].lo = cut_line; h[1].hi = n; h[1].first_from = cut_at; h[1].last_to = INT64_MAX;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_t thread;
    int threaded = n_half == 2 && pthread_create(&thread, NULL, skim_thread, &h[1]) == 0;
    skim_thread(&h[0]);
    if (threaded) pthread_join(thread, NULL);
    else if (n_half == 2) skim_thread(&h[1]);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < n_half; i++) {
        if (h[i].rc < 0) {
            sink_raise(&h[i].sink);
            goto done;
        }
    }
    Skimmer *a = &h[0];
    if (n_half == 2) {
        Skimmer *b = &h[1];
        /* The cut line's events in the second half come after the first half's. */
        int64_t *w = (int64_t *)b->wide.data;
        for (int64_t i = 0; i < b->n_wide; i++) {
            if (w[5 * i] == cut_line) w[5 * i + 1] += a->events[cut_line];
        }
        int64_t *bk = (int64_t *)b->blocks.data;
        for (size_t i = 0; i < b->blocks.len / (8 * SKIM_BLOCK_FIELDS); i++) {
            if (bk[SKIM_BLOCK_FIELDS * i] == cut_line)
                bk[SKIM_BLOCK_FIELDS * i + 3] += a->events[cut_line];
        }
        for (Py_ssize_t j = cut_line; j < n; j++) {
            if (j > cut_line) {
                a->id[j] = b->id[j];
                a->timestamp[j] = b->timestamp[j];
            }
            a->events[j] += b->events[j];
            a->samples[j] += b->samples[j];
            if (b->first[j] < a->first[j]) a->first[j] = b->first[j];
            if (b->last[j] > a->last[j]) a->last[j] = b->last[j];
            if (a->depth[j] < 0 || b->depth[j] < 0) a->depth[j] = -1;
            else if (b->depth[j] > a->depth[j]) a->depth[j] = b->depth[j];
        }
        grid_merge(&a->grid, &b->grid);
        if (b->wide_floor > a->wide_floor) a->wide_floor = b->wide_floor;
        int64_t base = (int64_t)a->text.len;
        int64_t *ends = (int64_t *)b->text_end.data;
        for (size_t i = 0; i < b->text_end.len / 8; i++) ends[i] += base;
        if (buf_put(&a->text, b->text.data ? b->text.data : "", b->text.len) < 0 ||
            buf_put(&a->text_end, b->text_end.data ? b->text_end.data : "",
                    b->text_end.len) < 0 ||
            buf_put(&a->wide, b->wide.data ? b->wide.data : "", b->wide.len) < 0 ||
            buf_put(&a->blocks, b->blocks.data ? b->blocks.data : "", b->blocks.len) < 0) {
            sink_raise(&a->sink);
            goto done;
        }
        a->disordered |= b->disordered;
    }
    result = PyDict_New();
    if (result == NULL) goto done;
    PyObject *items[] = {
        int64_bytes(a->id, n), int64_bytes(a->timestamp, n), int64_bytes(a->events, n),
        int64_bytes(a->samples, n), int64_bytes(a->first, n), int64_bytes(a->last, n),
        bytes_of(&a->text), bytes_of(&a->text_end),
        PyLong_FromLong(a->grid.shift), PyLong_FromLongLong((long long)a->grid.b0),
        int64_bytes(a->grid.count, rows * bins), int64_bytes(a->grid.covered, rows * bins),
        bytes_of(&a->wide), PyLong_FromLongLong((long long)wide_least(a)),
        PyLong_FromLong(a->disordered), bytes_of(&a->blocks), int64_bytes(a->depth, n)};
    const char *names[] = {"id", "timestamp", "events", "samples", "first", "last", "text",
                           "text_end", "shift", "b0", "count", "covered", "wide", "wide_ns",
                           "disordered", "blocks", "depth"};
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if (result != NULL && (items[i] == NULL ||
                               PyDict_SetItemString(result, names[i], items[i]) < 0)) {
            Py_CLEAR(result);
        }
        Py_XDECREF(items[i]);
    }
done:
    for (int i = 0; i < 2; i++) skimmer_free(&h[i]);
    if (opened) source_close(&s, &src_view);
    for (int i = 0; i < 5; i++) {
        if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
    }
    return result;
}

/* skim_window's read of one block: the events it keeps, and what it needs for each. */
typedef struct {
    int64_t block, ts, t0, t1, max_events;
    int64_t index;  /* the next event's index in the block */
    int64_t *kept;  /* events kept so far, of every block */
    Buf *out;
} WindowRead;

/* One event of the block (its bytes [a, b), readable up to lim), kept where it overlaps the
 * window: 0; 1 where it would be one more than max_events; -1 on an error. */
static ALWAYS_INLINE int
window_event(WindowRead *w, const uint8_t *a, const uint8_t *b, const uint8_t *lim)
{
    int64_t metadata, offset, duration;
    int sample;
    if (read_event(a, b, lim, -1, &metadata, &offset, &duration, &sample) < 0) return -1;
    int64_t start = (int64_t)((uint64_t)w->ts + (uint64_t)ps_to_ns(offset));
    int64_t dur = ps_to_ns(duration);
    if (dur < 0) dur = 0;
    int64_t stop = (int64_t)((uint64_t)start + (uint64_t)(dur > 1 ? dur : 1));
    if (start < w->t1 && stop > w->t0) {
        if ((*w->kept)++ == w->max_events) return 1;
        int64_t rec[5] = {w->block, w->index, start, dur, metadata};
        if (buf_put(w->out, rec, sizeof rec) < 0) return -1;
    }
    w->index++;
    return 0;
}

/* skim_window(source, spans, timestamps, t0, t1, max_events) -> Column or None. Per block
 * (spans: int64 triples of skim's blocks: the offset of its first event's key, the offset past
 * its last event, the end of its line's bytes; timestamps: its line's timestamp, ns), the
 * events whose times as laid out (at least 1 ns long) overlap [t0, t1): int64 records (block,
 * index in the block, start, duration, metadata id), times as the skim's. None where more
 * than max_events would be returned (the caller waits for the table). */
static PyObject *
skim_window_py(PyObject *module, PyObject *args)
{
    PyObject *source, *spans_obj, *ts_obj;
    long long t0, t1, max_events;
    if (!PyArg_ParseTuple(args, "OOOLLL", &source, &spans_obj, &ts_obj, &t0, &t1,
                          &max_events)) {
        return NULL;
    }
    Py_buffer spans_view, ts_view, src_view;
    spans_view.obj = ts_view.obj = NULL;
    PyObject *result = NULL;
    Buf out;
    memset(&out, 0, sizeof out);
    Source s;
    int opened = 0;
    if (PyObject_GetBuffer(spans_obj, &spans_view, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(ts_obj, &ts_view, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    Py_ssize_t n = ts_view.len / 8;
    if (spans_view.len != 24 * n || ts_view.len != 8 * n || max_events < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "skim_window: spans and timestamps differ in length, or max_events < 0");
        goto done;
    }
    if (source_open(&s, source, &src_view) < 0) goto done;
    opened = 1;
    const int64_t *spans = spans_view.buf, *ts = ts_view.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (spans[3 * k] < 0 || spans[3 * k + 1] < spans[3 * k] ||
            spans[3 * k + 2] < spans[3 * k + 1] || spans[3 * k + 2] > s.size) {
            PyErr_SetString(PyExc_ValueError, "skim_window: a block outside the file");
            goto done;
        }
    }
    ErrSink sink = {ERR_NONE, NULL, 0};
    int rc = 0, over = 0;
    s.nogil = 1;
    s.window = SKIM_WINDOW;
    Py_BEGIN_ALLOW_THREADS
    err_sink = &sink;
    int64_t kept = 0;
    for (Py_ssize_t k = 0; k < n && rc == 0 && !over; k++) {
        FieldIter it = {&s, spans[3 * k], spans[3 * k + 2], NULL, NULL};
        WindowRead w = {k, ts[k], t0, t1, max_events, 0, &kept, &out};
        int64_t block_end = spans[3 * k + 1];
        uint32_t field, wire;
        int64_t at = 0;
        uint64_t v;
        const uint8_t *a = NULL, *b = NULL;
        int more = 0, got = 0;
        for (;;) {
            /* A run of events read at once, as skim_line's (up to the block's end). */
            if (it.p != NULL && it.lim - it.p > EVENT_RUN_MARGIN && it.off < block_end) {
                const uint8_t *q = it.p, *p0 = it.p, *run_end = it.lim - EVENT_RUN_MARGIN;
                if (block_end - it.off < run_end - p0) run_end = p0 + (block_end - it.off);
                while (got == 0 && q < run_end && q[0] == EVENT_KEY && q[1] < 0x80) {
                    got = window_event(&w, q + 2, q + 2 + q[1], it.lim);
                    q += 2 + q[1];
                }
                it.off += q - p0;
                it.p = q;
            }
            if (got != 0) break;
            if ((more = iter_next(&it, &field, &wire, &at, &v, &a, &b)) != 1) break;
            if (at >= block_end) break;
            if (wire == 2 && field == 4 && (got = window_event(&w, a, b, it.lim)) != 0) break;
        }
        if (got > 0) over = 1;
        if (got < 0 || more < 0) rc = -1;
    }
    err_sink = NULL;
    Py_END_ALLOW_THREADS
    s.nogil = 0;
    if (rc < 0) {
        sink_raise(&sink);
    } else if (over) {
        result = Py_NewRef(Py_None);
    } else {
        result = column_from(&out);  /* (handed over, not copied: it can be tens of MB) */
    }
done:
    buf_free(&out);
    if (opened) source_close(&s, &src_view);
    if (spans_view.obj != NULL) PyBuffer_Release(&spans_view);
    if (ts_view.obj != NULL) PyBuffer_Release(&ts_view);
    return result;
}

static PyMethodDef module_methods[] = {
    {"decode", decode, METH_O,
     "Decode XSpace bytes into flat columns (see formats/xspace_columns.py)."},
    {"scan", scan, METH_O,
     "An XSpace's fields but its planes' lines, as bytes: (rest of the space, planes)."},
    {"decode_table", (PyCFunction)(void (*)(void))decode_table, METH_VARARGS | METH_KEYWORDS,
     "Decode an XSpace (a file descriptor or bytes) into a host table's columns; optional "
     "(line, name, stat name) code widths in bytes, 2 or 4 (default 4)."},
    {"skim_plan", skim_plan_py, METH_O, "Per line of an XSpace: its plane and its bytes."},
    {"skim", skim_py, METH_VARARGS,
     "Per line of an XSpace: its fields, its events' bounds and counts per span of time, "
     "and its longest events."},
    {"skim_window", skim_window_py, METH_VARARGS,
     "The events of a skim's blocks that overlap a window of time."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_xspace_decode", "Columnar XSpace decoder.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__xspace_decode(void)
{
    if (PyType_Ready(&ColumnType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
