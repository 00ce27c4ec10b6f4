/* Native implementation of brokers/store/codec.py: the per-message work of storing a send.
 *
 * Both functions mirror the pure-Python reference in codec.py byte for byte (tests/brokers/
 * test_codec.py checks that on generated messages); codec.py picks this module when it is built
 * and its ABI matches, and falls back to the Python version otherwise.
 *
 *   prepare(messages, limit) -> (records, rejects)
 *       records: (message, template, size, tags_hash) per legal message, template being the record's
 *       88 head bytes (body CRC, queue offset, physical offset and store timestamp left zero) followed
 *       by its tail (topic length, topic, properties length, properties);
 *       rejects: (index, status name, detail) per refused message.
 *   encode_run(records, start, stop, physical, now, queues, get_queue) -> (buffer, results, entries)
 *       the records [start, stop) laid out from ``physical``: one buffer with the whole records, one
 *       PutResult each, and the consume-queue entries as (queue, first queue offset, bytes); each
 *       queue's max_offset is advanced past the offsets given out.
 *   index_records(index_map, slots, max_index, data, base, start, skip) -> (next, status, done)
 *       the message index's hot loop (index.py): the whole records of data[start:] (data[0] being log
 *       offset base) put into the index file mapped at index_map, keys as codec.py describes; stops at
 *       the end (INDEX_DONE), at a record cut short (INDEX_TORN), at bytes that are no record
 *       (INDEX_CORRUPT) or when the file is full (INDEX_FULL: ``done`` keys of the record at ``next``
 *       are in, pass them as ``skip`` to the next file). A walk over 1 MiB or more runs without the GIL.
 *
 *   configure(result_type, ok, crc32, message_type, crc_library, crc_symbol, rules)
 *       called by codec.py at import: the types and the CRC function to use, and ``rules``, a dict with
 *       every limit this module enforces and every refusal it gives, rendered by Python
 *       (codec.native_rules()). This file holds no limit or message of its own: it only knows the
 *       record's layout, and configure() checks that Python's sizes and magic code agree with it.
 *
 * Record layout (big-endian): 0 totalSize, 4 magic, 8 bodyCRC, 12 queueId, 16 flag, 20 queueOffset,
 * 28 physicalOffset, 36 sysFlag, 40 bornTimestamp, 48 bornHost (ip, port), 56 storeTimestamp,
 * 64 storeHost (ip, port), 72 reconsumeTimes, 76 preparedTransactionOffset, 84 bodyLength, 88 body.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CODEC_ABI 3
/* The layout this file writes (configure() refuses rules that disagree with it). */
#define HEAD_BODY_SIZE 88
#define ENTRY_SIZE 20
#define TOPIC_LENGTH_MAX 255        /* the record's topic length is one byte */
#define PROPERTIES_LENGTH_MAX 32767 /* the record's properties length is a signed 16-bit integer */
#define RESULT_FIELDS 6
#define QUEUE_SCAN 16

static PyObject *s_topic, *s_queue_id, *s_body, *s_properties, *s_flag, *s_sys_flag, *s_born_timestamp,
    *s_born_host, *s_store_host, *s_reconsume_times, *s_prepared, *s_max_offset, *s_tags, *s_empty, *s_format,
    *s_size;
static PyObject *g_result_type, *g_ok, *g_crc32; /* configure() */
/* zlib's CRC-32 as a C function (crc, data, length) -> crc, when configure() finds one (isal's
 * crc32_gzip_refl): then encode_run computes CRCs without the GIL, else it calls g_crc32. */
typedef uint32_t (*crc32_fn)(uint32_t, const unsigned char *, uint64_t);
static crc32_fn g_crc32_native;

/* Message's fields: read straight from the slots of an exact Message (its member descriptors' offsets,
 * found by configure()), else with getattr. A slot read is a load; getattr costs ~25 ns, and prepare
 * and encode_run read 13 fields per message. */
enum { F_TOPIC, F_QUEUE_ID, F_BODY, F_PROPERTIES, F_FLAG, F_SYS_FLAG, F_BORN_TS, F_BORN_HOST, F_STORE_HOST,
       F_RECONSUME, F_PREPARED, N_FIELDS };
static PyObject **const g_names[N_FIELDS] = {&s_topic, &s_queue_id, &s_body, &s_properties, &s_flag, &s_sys_flag,
                                             &s_born_timestamp, &s_born_host, &s_store_host, &s_reconsume_times,
                                             &s_prepared};
static PyTypeObject *g_message_type;
static Py_ssize_t g_offsets[N_FIELDS];

/* The rules, from configure(): Python's limits, its status names and its refusals' details (strong
 * references). The integer and host fields are checked in the order Python lists them. */
enum { D_TOPIC_TYPE, D_TOPIC_UTF8, D_TOPIC_LENGTH, D_PROPERTIES_TYPE, D_PROPERTIES_UTF8, D_PROPERTIES_SIZE,
       D_BODY_TYPE, D_RECORD_SIZE, N_DETAILS };
static const char *const g_detail_keys[N_DETAILS] = {"topic_type", "topic_utf8", "topic_length", "properties_type",
                                                     "properties_utf8", "properties_size", "body_type", "record_size"};
#define N_INTS 6
#define N_HOSTS 2
typedef struct {
    int field;
    long long lo, hi;
    PyObject *detail;
} RangeRule;
typedef struct {
    int configured;
    uint32_t magic;
    long long min_topic_length, max_topic_length, max_properties_length;
    PyObject *illegal, *exceeded;  /* status names */
    PyObject *details[N_DETAILS];  /* D_RECORD_SIZE is a str.format template with {size} */
    RangeRule ints[N_INTS];        /* F_QUEUE_ID .. F_PREPARED, in Python's order */
    RangeRule hosts[N_HOSTS];      /* the port's range */
} Rules;
static Rules g_rules;

static PyObject *field(PyObject *msg, int f) { /* a new reference, or NULL with an exception */
    if (Py_TYPE(msg) == g_message_type) {
        PyObject *v = *(PyObject **)((char *)msg + g_offsets[f]);
        if (v) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(msg, *g_names[f]);
}

static inline void put16(unsigned char *p, uint16_t v) { p[0] = v >> 8; p[1] = (unsigned char)v; }
static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}
static inline void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }

/* --- prepare -------------------------------------------------------------------------------- */

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_add(Buf *b, const char *src, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *grown = PyMem_Realloc(b->data, cap);
        if (!grown) { PyErr_NoMemory(); return -1; }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* A refusal: returns 1 after appending (index, status, detail) to rejects, -1 on a Python error. */
static int reject(PyObject *rejects, Py_ssize_t index, PyObject *status, PyObject *detail) {
    if (!detail) return -1;
    PyObject *t = Py_BuildValue("(nON)", index, status, detail);
    if (!t) return -1;
    int rc = PyList_Append(rejects, t);
    Py_DECREF(t);
    return rc < 0 ? -1 : 1;
}

static PyObject *detail(int d) { /* a new reference to a configured detail */
    Py_INCREF(g_rules.details[d]);
    return g_rules.details[d];
}

/* An integer attribute within the rule's [lo, hi]: 0 and *out set, 1 after a refusal, -1 on error. */
static int int_field(PyObject *msg, const RangeRule *rule, long long *out, PyObject *rejects, Py_ssize_t index) {
    long long lo = rule->lo, hi = rule->hi;
    PyObject *v = field(msg, rule->field);
    if (!v) return -1;
    int overflow = 0;
    long long x = 0;
    if (PyLong_Check(v)) {
        x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) { Py_DECREF(v); return -1; }
    }
    int ok = PyLong_Check(v) && !overflow && x >= lo && x <= hi;
    Py_DECREF(v);
    if (!ok) {
        Py_INCREF(rule->detail);
        return reject(rejects, index, g_rules.illegal, rule->detail);
    }
    *out = x;
    return 0;
}

/* A (host, port) attribute: the IPv4 address (zeros when host is not one) and the port. */
/* The last host string parsed per field (a strong reference, so its address is not reused) and its address. */
static PyObject *g_host_seen[2];
static unsigned char g_host_ip[2][4];

static int host_field(PyObject *msg, const RangeRule *rule, unsigned char *ip, int32_t *port, PyObject *rejects,
                      Py_ssize_t index) {
    int f = rule->field;
    int slot = f == F_BORN_HOST ? 0 : 1;
    PyObject *v = field(msg, f);
    if (!v) return -1;
    int ok = PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(v, 0)) &&
             PyLong_Check(PyTuple_GET_ITEM(v, 1));
    long long p = 0;
    if (ok) {
        int overflow = 0;
        p = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(v, 1), &overflow);
        if (p == -1 && PyErr_Occurred()) { Py_DECREF(v); return -1; }
        ok = !overflow && p >= rule->lo && p <= rule->hi;
    }
    if (!ok) {
        Py_DECREF(v);
        Py_INCREF(rule->detail);
        return reject(rejects, index, g_rules.illegal, rule->detail);
    }
    PyObject *text = PyTuple_GET_ITEM(v, 0);
    if (text != g_host_seen[slot]) {
        Py_ssize_t n;
        const char *host = PyUnicode_AsUTF8AndSize(text, &n);
        struct in_addr addr;
        if (!host) PyErr_Clear();
        if (host && (Py_ssize_t)strlen(host) == n && inet_pton(AF_INET, host, &addr) == 1)
            memcpy(g_host_ip[slot], &addr, 4); /* network order: big-endian */
        else
            memset(g_host_ip[slot], 0, 4);
        Py_INCREF(text);
        Py_XSETREF(g_host_seen[slot], text);
    }
    memcpy(ip, g_host_ip[slot], 4);
    *port = (int32_t)p;
    Py_DECREF(v);
    return 0;
}

/* str(x) as f"{x}" formats it, UTF-8 encoded into b: 0, 1 (not encodable: refused), -1 error. */
static int add_text(Buf *b, PyObject *x) {
    PyObject *s;
    if (PyUnicode_CheckExact(x)) {
        s = x;
        Py_INCREF(s);
    } else {
        s = PyObject_Format(x, s_empty);
        if (!s) return -1;
    }
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) {
        Py_DECREF(s);
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return 1;
    }
    int rc = buf_add(b, u, n);
    Py_DECREF(s);
    return rc;
}

/* "k\x01v\x02" per property, into b: 0, 1 (refused, *why set to the detail's D_ index), -1 error. */
static int encode_properties(PyObject *props, Buf *b, int *why) {
    PyObject *items = NULL;
    int truth = PyObject_IsTrue(props);
    if (truth < 0) return -1;
    if (!truth) return 0;
    if (PyDict_Check(props)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(props, &pos, &k, &v)) {
            Py_INCREF(k);
            Py_INCREF(v);
            int rc = add_text(b, k);
            if (rc == 0) rc = buf_add(b, "\x01", 1);
            if (rc == 0) rc = add_text(b, v);
            if (rc == 0) rc = buf_add(b, "\x02", 1);
            Py_DECREF(k);
            Py_DECREF(v);
            if (rc) {
                if (rc > 0) *why = D_PROPERTIES_UTF8;
                return rc;
            }
        }
        return 0;
    }
    items = PyMapping_Items(props);
    if (!items) {
        PyErr_Clear();
        *why = D_PROPERTIES_TYPE;
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            Py_DECREF(items);
            *why = D_PROPERTIES_TYPE;
            return 1;
        }
        int rc = add_text(b, PyTuple_GET_ITEM(kv, 0));
        if (rc == 0) rc = buf_add(b, "\x01", 1);
        if (rc == 0) rc = add_text(b, PyTuple_GET_ITEM(kv, 1));
        if (rc == 0) rc = buf_add(b, "\x02", 1);
        if (rc) {
            Py_DECREF(items);
            if (rc > 0) *why = D_PROPERTIES_UTF8;
            return rc;
        }
    }
    Py_DECREF(items);
    return 0;
}

/* The tags hash of the TAGS property: Java's String.hashCode over its code points, as an int32. */
static int tags_hash(PyObject *props, long long *out) {
    *out = 0;
    PyObject *tags;
    if (PyDict_Check(props)) {
        tags = PyDict_GetItemWithError(props, s_tags);
        if (!tags) return PyErr_Occurred() ? -1 : 0;
        Py_INCREF(tags);
    } else {
        tags = PyObject_CallMethod(props, "get", "O", s_tags);
        if (!tags) return -1;
    }
    int truth = PyObject_IsTrue(tags);
    if (truth <= 0) {
        Py_DECREF(tags);
        return truth;
    }
    PyObject *s = PyUnicode_Check(tags) ? (Py_INCREF(tags), tags) : PyObject_Format(tags, s_empty);
    Py_DECREF(tags);
    if (!s) return -1;
    uint32_t h = 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    for (Py_ssize_t i = 0; i < n; i++) h = 31 * h + (uint32_t)PyUnicode_READ(kind, data, i);
    Py_DECREF(s);
    *out = (int32_t)h;
    return 0;
}

/* D_RECORD_SIZE's template formatted with the record's size (a new reference, or NULL). */
static PyObject *record_size_detail(Py_ssize_t size) {
    PyObject *format = PyObject_GetAttr(g_rules.details[D_RECORD_SIZE], s_format);
    if (!format) return NULL;
    PyObject *args = PyTuple_New(0), *kwargs = Py_BuildValue("{On}", s_size, size);
    PyObject *text = args && kwargs ? PyObject_Call(format, args, kwargs) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_DECREF(format);
    return text;
}

/* One message: appends its record to records, or its refusal to rejects. */
static int prepare_one(PyObject *msg, Py_ssize_t index, Py_ssize_t limit, Buf *props, PyObject *records,
                       PyObject *rejects) {
    long long queue_id, flag, sys_flag, born_ts, reconsume, prepared;
    unsigned char born_ip[4], store_ip[4];
    int32_t born_port, store_port;
    int rc;
    PyObject *topic = NULL, *body = NULL, *pmap = NULL, *template = NULL, *record = NULL;
    Py_buffer view = {0};

    topic = field(msg, F_TOPIC);
    if (!topic) return -1;
    if (!PyUnicode_Check(topic)) {
        rc = reject(rejects, index, g_rules.illegal, detail(D_TOPIC_TYPE));
        goto done;
    }
    Py_ssize_t tlen;
    const char *tbytes = PyUnicode_AsUTF8AndSize(topic, &tlen);
    if (!tbytes) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) { rc = -1; goto done; }
        PyErr_Clear();
        rc = reject(rejects, index, g_rules.illegal, detail(D_TOPIC_UTF8));
        goto done;
    }
    if (tlen < g_rules.min_topic_length || tlen > g_rules.max_topic_length) {
        rc = reject(rejects, index, g_rules.illegal, detail(D_TOPIC_LENGTH));
        goto done;
    }
    pmap = field(msg, F_PROPERTIES);
    if (!pmap) { rc = -1; goto done; }
    props->len = 0;
    int why = 0;
    rc = encode_properties(pmap, props, &why);
    if (rc) {
        if (rc > 0) rc = reject(rejects, index, g_rules.illegal, detail(why));
        goto done;
    }
    if (props->len > g_rules.max_properties_length) {
        rc = reject(rejects, index, g_rules.exceeded, detail(D_PROPERTIES_SIZE));
        goto done;
    }
    body = field(msg, F_BODY);
    if (!body) { rc = -1; goto done; }
    if (!(PyBytes_Check(body) || PyByteArray_Check(body)) || PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        rc = reject(rejects, index, g_rules.illegal, detail(D_BODY_TYPE));
        goto done;
    }
    long long ints[N_FIELDS] = {0};
    for (int k = 0; k < N_INTS; k++)
        if ((rc = int_field(msg, &g_rules.ints[k], &ints[g_rules.ints[k].field], rejects, index))) goto done;
    for (int k = 0; k < N_HOSTS; k++) {
        const RangeRule *rule = &g_rules.hosts[k];
        int born = rule->field == F_BORN_HOST;
        if ((rc = host_field(msg, rule, born ? born_ip : store_ip, born ? &born_port : &store_port, rejects, index)))
            goto done;
    }
    queue_id = ints[F_QUEUE_ID];
    flag = ints[F_FLAG];
    sys_flag = ints[F_SYS_FLAG];
    born_ts = ints[F_BORN_TS];
    reconsume = ints[F_RECONSUME];
    prepared = ints[F_PREPARED];

    Py_ssize_t tail = 1 + tlen + 2 + props->len;
    Py_ssize_t size = HEAD_BODY_SIZE + view.len + tail;
    if (size > limit || view.len > INT32_MAX) {
        rc = reject(rejects, index, g_rules.illegal, record_size_detail(size));
        goto done;
    }
    long long tags;
    if (tags_hash(pmap, &tags) < 0) { rc = -1; goto done; }
    template = PyBytes_FromStringAndSize(NULL, HEAD_BODY_SIZE + tail);
    if (!template) { rc = -1; goto done; }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(template);
    memset(p, 0, HEAD_BODY_SIZE);
    put32(p, (uint32_t)size);
    put32(p + 4, g_rules.magic);
    put32(p + 12, (uint32_t)queue_id);
    put32(p + 16, (uint32_t)flag);
    put32(p + 36, (uint32_t)sys_flag);
    put64(p + 40, (uint64_t)born_ts);
    memcpy(p + 48, born_ip, 4);
    put32(p + 52, (uint32_t)born_port);
    memcpy(p + 64, store_ip, 4);
    put32(p + 68, (uint32_t)store_port);
    put32(p + 72, (uint32_t)reconsume);
    put64(p + 76, (uint64_t)prepared);
    put32(p + 84, (uint32_t)view.len);
    p += HEAD_BODY_SIZE;
    *p++ = (unsigned char)tlen;
    memcpy(p, tbytes, tlen);
    p += tlen;
    put16(p, (uint16_t)props->len);
    memcpy(p + 2, props->data, props->len);
    record = PyTuple_New(4);
    PyObject *size_obj = PyLong_FromSsize_t(size), *tags_obj = PyLong_FromLongLong(tags);
    if (!record || !size_obj || !tags_obj) {
        Py_XDECREF(size_obj);
        Py_XDECREF(tags_obj);
        rc = -1;
        goto done;
    }
    Py_INCREF(msg);
    PyTuple_SET_ITEM(record, 0, msg);
    PyTuple_SET_ITEM(record, 1, template);
    template = NULL; /* the record holds it now */
    PyTuple_SET_ITEM(record, 2, size_obj);
    PyTuple_SET_ITEM(record, 3, tags_obj);
    rc = PyList_Append(records, record) < 0 ? -1 : 0;
done:
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(record);
    Py_XDECREF(template);
    Py_XDECREF(body);
    Py_XDECREF(pmap);
    Py_XDECREF(topic);
    return rc < 0 ? -1 : 0;
}

static PyObject *prepare(PyObject *self, PyObject *args) {
    PyObject *messages;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On:prepare", &messages, &limit)) return NULL;
    if (!g_rules.configured) {
        PyErr_SetString(PyExc_RuntimeError, "_codec.configure() was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence");
    if (!seq) return NULL;
    PyObject *records = PyList_New(0), *rejects = PyList_New(0);
    Buf props = {0};
    if (!records || !rejects) goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        if (prepare_one(PySequence_Fast_GET_ITEM(seq, i), i, limit, &props, records, rejects) < 0) goto fail;
    PyMem_Free(props.data);
    Py_DECREF(seq);
    return Py_BuildValue("(NN)", records, rejects);
fail:
    PyMem_Free(props.data);
    Py_DECREF(seq);
    Py_XDECREF(records);
    Py_XDECREF(rejects);
    return NULL;
}

/* --- encode_run ----------------------------------------------------------------------------- */

typedef struct {
    PyObject *cq, *topic; /* strong references */
    long long queue_id, first, next;
    Buf entries;
} Queue;

static void free_queues(Queue *qs, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(qs[i].cq);
        Py_XDECREF(qs[i].topic);
        PyMem_Free(qs[i].entries.data);
    }
    PyMem_Free(qs);
}

/* The index in qs of (topic, queue_id)'s consume queue, adding it (its next offset read from the
 * queue) when the run has not met it yet; -1 on error. */
static Py_ssize_t find_queue(Queue **qs, Py_ssize_t *n, Py_ssize_t *cap, PyObject *index, PyObject *topic,
                             long long queue_id, PyObject *queues, PyObject *get_queue) {
    PyObject *qid = PyLong_FromLongLong(queue_id);
    if (!qid) return -1;
    PyObject *key = PyTuple_Pack(2, topic, qid);
    Py_DECREF(qid);
    if (!key) return -1;
    PyObject *found = PyDict_GetItemWithError(index, key);
    if (found) {
        Py_DECREF(key);
        return PyLong_AsSsize_t(found);
    }
    if (PyErr_Occurred()) goto fail;
    PyObject *cq = PyDict_GetItemWithError(queues, key);
    if (cq) Py_INCREF(cq);
    else if (PyErr_Occurred()) goto fail;
    else if (!(cq = PyObject_CallFunction(get_queue, "OL", topic, queue_id))) goto fail;
    PyObject *max = PyObject_GetAttr(cq, s_max_offset);
    long long next = max ? PyLong_AsLongLong(max) : -1;
    Py_XDECREF(max);
    if (next == -1 && PyErr_Occurred()) { Py_DECREF(cq); goto fail; }
    if (*n == *cap) {
        Py_ssize_t grown_cap = *cap ? *cap * 2 : 8;
        Queue *grown = PyMem_Realloc(*qs, grown_cap * sizeof(Queue));
        if (!grown) { Py_DECREF(cq); PyErr_NoMemory(); goto fail; }
        *qs = grown;
        *cap = grown_cap;
    }
    Queue *q = &(*qs)[*n];
    memset(q, 0, sizeof(*q));
    q->cq = cq;
    q->topic = topic;
    Py_INCREF(topic);
    q->queue_id = queue_id;
    q->first = q->next = next;
    PyObject *at = PyLong_FromSsize_t(*n);
    if (!at || PyDict_SetItem(index, key, at) < 0) { Py_XDECREF(at); (*n)++; goto fail; }
    Py_DECREF(at);
    Py_DECREF(key);
    return (*n)++;
fail:
    Py_DECREF(key);
    return -1;
}

static PyObject *new_result(PyObject *physical, PyObject *queue_offset, PyObject *size, PyObject *now) {
    PyTypeObject *type = (PyTypeObject *)g_result_type;
    PyObject *r = type->tp_alloc(type, RESULT_FIELDS); /* a tuple subclass (a NamedTuple) */
    if (!r) return NULL;
    Py_INCREF(g_ok);
    Py_INCREF(now);
    Py_INCREF(s_empty);
    PyTuple_SET_ITEM(r, 0, g_ok);
    PyTuple_SET_ITEM(r, 1, physical);
    PyTuple_SET_ITEM(r, 2, queue_offset);
    PyTuple_SET_ITEM(r, 3, size);
    PyTuple_SET_ITEM(r, 4, now);
    PyTuple_SET_ITEM(r, 5, s_empty);
    return r;
}

/* What encode_run copies for one record, gathered while holding the GIL and copied without it. */
typedef struct {
    const unsigned char *template;
    Py_ssize_t tail;
    Py_buffer body;
    long long queue_offset, physical;
    uint32_t crc; /* when the CRC is computed through Python (no native CRC function) */
} Slot;

static void release_slots(Slot *slots, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&slots[i].body);
    PyMem_Free(slots);
}

static PyObject *encode_run(PyObject *self, PyObject *args) {
    PyObject *records, *queues, *get_queue;
    Py_ssize_t start, stop;
    long long physical, now;
    if (!PyArg_ParseTuple(args, "O!nnLLO!O:encode_run", &PyList_Type, &records, &start, &stop, &physical, &now,
                          &PyDict_Type, &queues, &get_queue))
        return NULL;
    if (!g_result_type) {
        PyErr_SetString(PyExc_RuntimeError, "_codec.configure() was not called");
        return NULL;
    }
    if (start < 0 || stop > PyList_GET_SIZE(records) || start > stop) {
        PyErr_SetString(PyExc_IndexError, "run out of range");
        return NULL;
    }
    Py_ssize_t total = 0, n = stop - start;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 4 || !PyBytes_Check(PyTuple_GET_ITEM(rec, 1)) ||
            PyBytes_GET_SIZE(PyTuple_GET_ITEM(rec, 1)) < HEAD_BODY_SIZE) {
            PyErr_SetString(PyExc_TypeError, "records must come from prepare()");
            return NULL;
        }
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(rec, 2));
        if (size == -1 && PyErr_Occurred()) return NULL;
        total += size;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    PyObject *results = PyList_New(n);
    PyObject *index = PyDict_New();
    PyObject *now_obj = PyLong_FromLongLong(now);
    PyObject *entries = NULL;
    Slot *slots = PyMem_Calloc(n ? n : 1, sizeof(Slot));
    Queue *qs = NULL;
    Py_ssize_t nq = 0, qcap = 0, last = -1;
    if (!out || !results || !index || !now_obj || !slots) {
        if (!slots) PyErr_NoMemory();
        goto fail;
    }
    /* Phase 1, with the GIL: queue offsets, consume-queue entries, results, and the bodies' buffers. */
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        PyObject *msg = PyTuple_GET_ITEM(rec, 0), *template = PyTuple_GET_ITEM(rec, 1);
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(rec, 2));
        long long tags = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 3));
        if (tags == -1 && PyErr_Occurred()) goto fail;
        Slot *slot = &slots[i - start];
        const unsigned char *t = (const unsigned char *)PyBytes_AS_STRING(template);
        long long queue_id = ((long long)t[12] << 24) | (t[13] << 16) | (t[14] << 8) | t[15];

        PyObject *topic = field(msg, F_TOPIC);
        if (!topic) goto fail;
        /* The run's queues: the last one used, then a scan of the first few (a send usually spreads
         * over a handful of queues), then the dict. */
        Queue *q = last >= 0 ? &qs[last] : NULL;
        if (!q || q->queue_id != queue_id || (q->topic != topic && PyUnicode_Compare(q->topic, topic) != 0)) {
            last = -1;
            for (Py_ssize_t k = 0; k < nq && k < QUEUE_SCAN; k++) {
                if (qs[k].queue_id == queue_id && (qs[k].topic == topic || PyUnicode_Compare(qs[k].topic, topic) == 0)) {
                    last = k;
                    break;
                }
            }
            if (PyErr_Occurred()) { Py_DECREF(topic); goto fail; }
            if (last < 0) last = find_queue(&qs, &nq, &qcap, index, topic, queue_id, queues, get_queue);
            if (last < 0) { Py_DECREF(topic); goto fail; }
            q = &qs[last];
        }
        Py_DECREF(topic);

        PyObject *body = field(msg, F_BODY);
        if (!body) goto fail;
        int got = PyObject_GetBuffer(body, &slot->body, PyBUF_SIMPLE);
        if (got == 0 && !g_crc32_native) {
            PyObject *crc_obj = PyObject_CallOneArg(g_crc32, body);
            slot->crc = crc_obj ? (uint32_t)PyLong_AsUnsignedLongMask(crc_obj) : 0;
            if (!crc_obj) got = -1;
            Py_XDECREF(crc_obj);
            if (PyErr_Occurred()) got = -1;
        }
        Py_DECREF(body);
        if (got < 0) goto fail;
        slot->template = t;
        slot->tail = PyBytes_GET_SIZE(template) - HEAD_BODY_SIZE;
        if (HEAD_BODY_SIZE + slot->body.len + slot->tail != size) {
            PyErr_SetString(PyExc_ValueError, "a message body changed after prepare()");
            goto fail;
        }
        slot->queue_offset = q->next++;
        slot->physical = physical;

        unsigned char entry[ENTRY_SIZE];
        put64(entry, (uint64_t)physical);
        put32(entry + 8, (uint32_t)size);
        put64(entry + 12, (uint64_t)tags);
        if (buf_add(&q->entries, (const char *)entry, ENTRY_SIZE) < 0) goto fail;

        PyObject *phys_obj = PyLong_FromLongLong(physical), *qo_obj = PyLong_FromLongLong(slot->queue_offset);
        PyObject *size_obj = PyTuple_GET_ITEM(rec, 2);
        Py_INCREF(size_obj);
        PyObject *r = (phys_obj && qo_obj) ? new_result(phys_obj, qo_obj, size_obj, now_obj) : NULL;
        if (!r) {
            Py_XDECREF(phys_obj);
            Py_XDECREF(qo_obj);
            Py_DECREF(size_obj);
            goto fail;
        }
        PyList_SET_ITEM(results, i - start, r);
        physical += size;
    }
    /* Phase 2, without the GIL (the store's I/O thread needs it to finish its writes): the copying
     * and the CRCs. Every buffer read here is held by a reference or a buffer export. */
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    crc32_fn native = g_crc32_native;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        Slot *slot = &slots[k];
        Py_ssize_t len = slot->body.len;
        uint32_t crc = native ? native(0, slot->body.buf, (uint64_t)len) : slot->crc;
        memcpy(p, slot->template, HEAD_BODY_SIZE);
        put32(p + 8, crc & 0x7FFFFFFFu);
        put64(p + 20, (uint64_t)slot->queue_offset);
        put64(p + 28, (uint64_t)slot->physical);
        put64(p + 56, (uint64_t)now);
        memcpy(p + HEAD_BODY_SIZE, slot->body.buf, len);
        memcpy(p + HEAD_BODY_SIZE + len, slot->template + HEAD_BODY_SIZE, slot->tail);
        p += HEAD_BODY_SIZE + len + slot->tail;
    }
    Py_END_ALLOW_THREADS
    release_slots(slots, n);
    slots = NULL;
    entries = PyList_New(nq);
    if (!entries) goto fail;
    for (Py_ssize_t i = 0; i < nq; i++) {
        Queue *q = &qs[i];
        PyObject *next = PyLong_FromLongLong(q->next);
        if (!next || PyObject_SetAttr(q->cq, s_max_offset, next) < 0) { Py_XDECREF(next); goto fail; }
        Py_DECREF(next);
        PyObject *e = Py_BuildValue("(OLy#)", q->cq, q->first, (const char *)q->entries.data, q->entries.len);
        if (!e) goto fail;
        PyList_SET_ITEM(entries, i, e);
    }
    free_queues(qs, nq);
    Py_DECREF(index);
    Py_DECREF(now_obj);
    return Py_BuildValue("(NNN)", out, results, entries);
fail:
    if (slots) release_slots(slots, n); /* (zeroed slots hold no buffer: releasing them is a no-op) */
    free_queues(qs, nq);
    Py_XDECREF(out);
    Py_XDECREF(results);
    Py_XDECREF(index);
    Py_XDECREF(now_obj);
    Py_XDECREF(entries);
    return NULL;
}

/* --- configure ------------------------------------------------------------------------------ */

/* rules[key] as a long long within [lo, hi]: 0, or -1 with an exception. */
static int rule_int(PyObject *rules, const char *key, long long lo, long long hi, long long *out) {
    PyObject *v = PyDict_GetItemString(rules, key); /* borrowed */
    if (!v || !PyLong_Check(v)) {
        PyErr_Format(PyExc_ValueError, "rules[%s] must be an integer", key);
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "rules[%s] = %lld does not fit this codec's record layout (%lld..%lld)", key, x,
                     lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static PyObject *rule_str(PyObject *rules, const char *key) { /* a new reference, or NULL */
    PyObject *v = PyDict_GetItemString(rules, key);
    if (!v || !PyUnicode_Check(v)) {
        PyErr_Format(PyExc_ValueError, "rules[%s] must be a string", key);
        return NULL;
    }
    Py_INCREF(v);
    return v;
}

/* rules[key]: a tuple of (field name, lo, hi, detail), one per field in fields[0..n), each once, into
 * out (in the tuple's order: the order of the checks). 0, or -1 with an exception. */
static int rule_ranges(PyObject *rules, const char *key, const int *fields, int n, RangeRule *out) {
    PyObject *v = PyDict_GetItemString(rules, key);
    if (!v || !PyTuple_Check(v) || PyTuple_GET_SIZE(v) != n) {
        PyErr_Format(PyExc_ValueError, "rules[%s] must be a tuple of %d (name, lo, hi, detail)", key, n);
        return -1;
    }
    int seen = 0;
    for (int k = 0; k < n; k++) {
        PyObject *item = PyTuple_GET_ITEM(v, k), *name, *detail_text;
        long long lo, hi;
        if (!PyTuple_Check(item)) {
            PyErr_Format(PyExc_ValueError, "rules[%s] must be a tuple of %d (name, lo, hi, detail)", key, n);
            return -1;
        }
        if (!PyArg_ParseTuple(item, "OLLU", &name, &lo, &hi, &detail_text)) return -1;
        int j = -1;
        for (int g = 0; g < n; g++)
            if (PyUnicode_Check(name) && PyUnicode_Compare(name, *g_names[fields[g]]) == 0) j = g;
        if (j < 0 || seen & (1 << j) || lo > hi) {
            PyErr_Format(PyExc_ValueError, "rules[%s]: %R is not one of its fields, or repeated, or lo > hi", key, name);
            return -1;
        }
        seen |= 1 << j;
        out[k].field = fields[j];
        out[k].lo = lo;
        out[k].hi = hi;
        Py_INCREF(detail_text);
        out[k].detail = detail_text;
    }
    return 0;
}

static void clear_rules(Rules *r) {
    Py_CLEAR(r->illegal);
    Py_CLEAR(r->exceeded);
    for (int d = 0; d < N_DETAILS; d++) Py_CLEAR(r->details[d]);
    for (int k = 0; k < N_INTS; k++) Py_CLEAR(r->ints[k].detail);
    for (int k = 0; k < N_HOSTS; k++) Py_CLEAR(r->hosts[k].detail);
    r->configured = 0;
}

static int read_rules(PyObject *rules, Rules *r) {
    long long head, entry, magic;
    memset(r, 0, sizeof(*r));
    if (rule_int(rules, "head_body_size", HEAD_BODY_SIZE, HEAD_BODY_SIZE, &head) < 0 ||
        rule_int(rules, "entry_size", ENTRY_SIZE, ENTRY_SIZE, &entry) < 0 ||
        rule_int(rules, "magic", 0, UINT32_MAX, &magic) < 0 ||
        rule_int(rules, "min_topic_length", 0, TOPIC_LENGTH_MAX, &r->min_topic_length) < 0 ||
        rule_int(rules, "max_topic_length", r->min_topic_length, TOPIC_LENGTH_MAX, &r->max_topic_length) < 0 ||
        rule_int(rules, "max_properties_length", 0, PROPERTIES_LENGTH_MAX, &r->max_properties_length) < 0)
        goto fail;
    r->magic = (uint32_t)magic;
    if (!(r->illegal = rule_str(rules, "illegal")) || !(r->exceeded = rule_str(rules, "exceeded"))) goto fail;
    for (int d = 0; d < N_DETAILS; d++)
        if (!(r->details[d] = rule_str(rules, g_detail_keys[d]))) goto fail;
    static const int ints[N_INTS] = {F_QUEUE_ID, F_FLAG, F_SYS_FLAG, F_BORN_TS, F_RECONSUME, F_PREPARED};
    static const int hosts[N_HOSTS] = {F_BORN_HOST, F_STORE_HOST};
    if (rule_ranges(rules, "ints", ints, N_INTS, r->ints) < 0) goto fail;
    if (rule_ranges(rules, "hosts", hosts, N_HOSTS, r->hosts) < 0) goto fail;
    for (int k = 0; k < N_INTS; k++) { /* the layout's widths bound what a rule may allow */
        int wide = r->ints[k].field == F_BORN_TS || r->ints[k].field == F_PREPARED;
        if (!wide && (r->ints[k].lo < INT32_MIN || r->ints[k].hi > INT32_MAX)) {
            PyErr_Format(PyExc_ValueError, "rules[ints]: %R does not fit its 32-bit field", *g_names[r->ints[k].field]);
            goto fail;
        }
    }
    for (int k = 0; k < N_HOSTS; k++)
        if (r->hosts[k].lo < INT32_MIN || r->hosts[k].hi > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "rules[hosts]: a port must fit its 32-bit field");
            goto fail;
        }
    r->configured = 1;
    return 0;
fail:
    clear_rules(r);
    return -1;
}

/* --- index_records: the message index's hot loop (index.py) ---------------------------------- */

/* RocketMQ's index file (IndexFile/IndexHeader): a 40-byte header (beginTimestamp, endTimestamp,
 * beginPhyOffset, endPhyOffset: longs; hashSlotCount, indexCount: ints), slots of 4 bytes, entries of
 * 20 (keyHash int, phyOffset long, timeDiff int, previous entry int); big-endian. What is indexed and
 * how records are recognised come from configure() (rules["index"]). */
#define IX_HEADER 40
#define IX_SLOT 4
#define IX_ENTRY 20
#define IX_NAME_MAX 64
#define INDEX_RELEASE_GIL_BYTES (1 << 20) /* a walk over this much data runs without the GIL */
enum { IX_DONE, IX_TORN, IX_FULL, IX_CORRUPT }; /* codec.INDEX_* */
typedef struct {
    int configured;
    uint32_t blank_magic;
    uint32_t transaction_mask, transaction_skip; /* sysFlag & mask == skip: not indexed (a rollback) */
    unsigned char uniq[IX_NAME_MAX], keys[IX_NAME_MAX];
    size_t uniq_len, keys_len;
    unsigned char separator;
} IndexRules;
static IndexRules g_index;

static inline uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t get64(const unsigned char *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

/* Strict UTF-8, as Python's decoder takes it (no surrogates, no overlong forms, at most U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        while (i + 8 <= n) { /* ASCII, 8 bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return 0;
        if (i + need >= n) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

/* Java's String.hashCode continued over valid UTF-8 text: h = 31 h + c per UTF-16 code unit. */
static uint32_t java_hash(uint32_t h, const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        uint32_t cp;
        if (c < 0x80) { h = 31 * h + c; i++; continue; }
        if (c < 0xE0) { cp = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F); i += 2; }
        else if (c < 0xF0) { cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F); i += 3; }
        else {
            cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) | ((uint32_t)(s[i + 2] & 0x3F) << 6) |
                 (s[i + 3] & 0x3F);
            i += 4;
        }
        if (cp > 0xFFFF) { /* a surrogate pair */
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        } else {
            h = 31 * h + cp;
        }
    }
    return h;
}

typedef struct {
    unsigned char *map; /* the index file */
    uint64_t slots, max_index;
} IndexFile;

/* IndexFile.putKey: 0, or 1 when the file is full. The entry and the header are written before the
 * slot that makes the entry reachable, so a reader never follows a slot to an entry not written. */
static int put_key(IndexFile *f, uint32_t hash, int64_t phy, int64_t ts) {
    unsigned char *m = f->map;
    int64_t count = (int32_t)get32(m + 36);
    if (count <= 0) count = 1; /* IndexHeader.load: entry 0 is never used */
    if ((uint64_t)count >= f->max_index) return 1;
    int32_t key = (int32_t)hash;
    if (key < 0) key = key == INT32_MIN ? 0 : -key; /* Math.abs, and 0 for Integer.MIN_VALUE */
    unsigned char *slot = m + IX_HEADER + ((uint64_t)key % f->slots) * IX_SLOT;
    int64_t prev = (int32_t)get32(slot);
    if (prev <= 0 || prev > count) prev = 0;
    int64_t begin = (int64_t)get64(m);
    int64_t diff = begin <= 0 ? 0 : (int64_t)((uint64_t)ts - (uint64_t)begin) / 1000; /* Java's long: wraps, truncates */
    if (begin <= 0) diff = 0;
    else if (diff > INT32_MAX) diff = INT32_MAX;
    else if (diff < 0) diff = 0;
    unsigned char *e = m + IX_HEADER + f->slots * IX_SLOT + (uint64_t)count * IX_ENTRY;
    put32(e, (uint32_t)key);
    put64(e + 4, (uint64_t)phy);
    put32(e + 12, (uint32_t)diff);
    put32(e + 16, (uint32_t)prev);
    if (count <= 1) {
        put64(m + 16, (uint64_t)phy);
        put64(m, (uint64_t)ts);
    }
    if (prev == 0) put32(m + 32, get32(m + 32) + 1);
    put64(m + 24, (uint64_t)phy);
    put64(m + 8, (uint64_t)ts);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    put32(m + 36, (uint32_t)(count + 1));
    __atomic_thread_fence(__ATOMIC_RELEASE);
    put32(slot, (uint32_t)count);
    return 0;
}

/* The UNIQ_KEY and KEYS values among a record's properties, as Java reads them (the last of a
 * repeated name wins; a pair without a name or a value is skipped). */
static void find_keys(const unsigned char *p, size_t n, const unsigned char **uniq, size_t *uniq_len,
                      const unsigned char **keys, size_t *keys_len) {
    size_t i = 0;
    while (i < n) {
        const unsigned char *end = memchr(p + i, 2, n - i);
        size_t stop = end ? (size_t)(end - p) : n;
        const unsigned char *sep = memchr(p + i, 1, stop - i);
        if (sep) {
            size_t name = (size_t)(sep - (p + i)), value = stop - i - name - 1;
            if (name > 0 && value > 0) {
                if (name == g_index.uniq_len && !memcmp(p + i, g_index.uniq, name)) { *uniq = sep + 1; *uniq_len = value; }
                else if (name == g_index.keys_len && !memcmp(p + i, g_index.keys, name)) { *keys = sep + 1; *keys_len = value; }
            }
        }
        i = stop + 1;
    }
}

/* One key into the index unless it is empty or among the first *skip of its record: 0, or 1 when full. */
static int index_key(IndexFile *f, uint32_t prefix, const unsigned char *k, size_t n, int64_t phy, int64_t ts,
                     long *done, long *skip) {
    if (n == 0) return 0;
    if (*skip > 0) { (*skip)--; (*done)++; return 0; }
    if (put_key(f, java_hash(prefix, k, n), phy, ts)) return 1;
    (*done)++;
    return 0;
}

typedef struct {
    int64_t next; /* the log offset where the walk stopped */
    int status;
    long done; /* IX_FULL: keys of the record at next already in the index */
} Walk;

/* The record at pos (its bounds checked as message.decode checks them) indexed: IX_DONE, IX_FULL. */
static int index_record(IndexFile *f, const unsigned char *r, uint32_t size, int64_t phy, long *done, long skip) {
    uint32_t sys_flag = get32(r + 36);
    if ((sys_flag & g_index.transaction_mask) == g_index.transaction_skip) return IX_DONE;
    int64_t ts = (int64_t)get64(r + 56);
    uint32_t body = get32(r + 84);
    const unsigned char *topic = r + HEAD_BODY_SIZE + body + 1;
    size_t topic_len = topic[-1];
    const unsigned char *props = topic + topic_len + 2;
    size_t props_len = size - (size_t)(props - r);
    if (!utf8_valid(topic, topic_len) || !utf8_valid(props, props_len)) return IX_DONE;
    const unsigned char *uniq = NULL, *keys = NULL;
    size_t uniq_len = 0, keys_len = 0;
    find_keys(props, props_len, &uniq, &uniq_len, &keys, &keys_len);
    if (!uniq && !keys) return IX_DONE;
    uint32_t prefix = java_hash(0, topic, topic_len) * 31 + '#';
    *done = 0;
    if (uniq && index_key(f, prefix, uniq, uniq_len, phy, ts, done, &skip)) return IX_FULL;
    size_t i = 0;
    while (keys && i <= keys_len) {
        const unsigned char *sp = memchr(keys + i, g_index.separator, keys_len - i);
        size_t stop = sp ? (size_t)(sp - keys) : keys_len;
        if (index_key(f, prefix, keys + i, stop - i, phy, ts, done, &skip)) return IX_FULL;
        i = stop + 1;
    }
    return IX_DONE;
}

/* Walk the records of data[pos..], data[0] being log offset base. */
static Walk walk(IndexFile *f, const unsigned char *data, Py_ssize_t len, int64_t base, Py_ssize_t pos, long skip) {
    Walk w = {0, IX_DONE, 0};
    while (pos < len) {
        if (len - pos < 8) { w.status = IX_TORN; break; }
        const unsigned char *r = data + pos;
        uint32_t size = get32(r), magic = get32(r + 4);
        if (magic == g_index.blank_magic) {
            if ((int32_t)size < 8) { w.status = IX_CORRUPT; break; }
            pos += size;
            continue;
        }
        if (magic != g_rules.magic || (int32_t)size < HEAD_BODY_SIZE + 3) { w.status = IX_CORRUPT; break; }
        if ((Py_ssize_t)size > len - pos) { w.status = IX_TORN; break; }
        int32_t body = (int32_t)get32(r + 84);
        if (body < 0 || (int64_t)HEAD_BODY_SIZE + body + 3 > size) { w.status = IX_CORRUPT; break; }
        uint32_t topic_end = HEAD_BODY_SIZE + (uint32_t)body + 1 + r[HEAD_BODY_SIZE + body];
        if (topic_end + 2 > size) { w.status = IX_CORRUPT; break; }
        int16_t props = (int16_t)((r[topic_end] << 8) | r[topic_end + 1]);
        if (props < 0 || topic_end + 2 + (uint32_t)props != size) { w.status = IX_CORRUPT; break; }
        long done = 0;
        if (index_record(f, r, size, base + pos, &done, skip) == IX_FULL) {
            w.status = IX_FULL;
            w.done = done;
            break;
        }
        skip = 0;
        pos += size;
    }
    w.next = base + pos;
    return w;
}

static PyObject *index_records(PyObject *self, PyObject *args) {
    Py_buffer map, data;
    unsigned long long slots, max_index;
    long long base;
    Py_ssize_t start;
    long skip;
    if (!PyArg_ParseTuple(args, "w*KKy*Lnl:index_records", &map, &slots, &max_index, &data, &base, &start, &skip))
        return NULL;
    PyObject *out = NULL;
    if (!g_index.configured) PyErr_SetString(PyExc_RuntimeError, "_codec.configure() was not called");
    else if (slots < 1 || max_index < 2 || slots > INT32_MAX || max_index > INT32_MAX ||
             (unsigned long long)map.len < IX_HEADER + slots * IX_SLOT + max_index * IX_ENTRY)
        PyErr_SetString(PyExc_ValueError, "the index file is smaller than its slots and entries");
    else if (start < 0 || skip < 0)
        PyErr_SetString(PyExc_ValueError, "start and skip must be >= 0");
    else {
        IndexFile f = {map.buf, slots, max_index};
        Walk w;
        /* Both buffers stay exported until released below: the file cannot be unmapped meanwhile. A
         * short walk keeps the GIL: taking it back from a busy event loop can cost the caller (the
         * store's I/O thread, whose job acknowledges sends) a whole switch interval, far more than
         * the walk (~0.1 us a key). */
        if (data.len - start >= INDEX_RELEASE_GIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            w = walk(&f, data.buf, data.len, base, start, skip);
            Py_END_ALLOW_THREADS
        } else {
            w = walk(&f, data.buf, data.len, base, start, skip);
        }
        out = Py_BuildValue("(Lil)", (long long)w.next, w.status, w.done);
    }
    PyBuffer_Release(&map);
    PyBuffer_Release(&data);
    return out;
}

/* rules["index"]: what index_records recognises and indexes (codec.native_rules()). */
static int read_index_rules(PyObject *rules, IndexRules *ix) {
    PyObject *d = PyDict_GetItemString(rules, "index");
    if (!d || !PyDict_Check(d)) {
        PyErr_SetString(PyExc_ValueError, "rules[index] must be a dict");
        return -1;
    }
    long long blank, mask, skip;
    memset(ix, 0, sizeof(*ix));
    if (rule_int(d, "blank_magic", 0, UINT32_MAX, &blank) < 0 || rule_int(d, "transaction_mask", 0, UINT32_MAX, &mask) < 0 ||
        rule_int(d, "transaction_skip", 0, UINT32_MAX, &skip) < 0)
        return -1;
    const char *names[2] = {"uniq_key", "keys"};
    unsigned char *into[2] = {ix->uniq, ix->keys};
    size_t *lens[2] = {&ix->uniq_len, &ix->keys_len};
    for (int k = 0; k < 2; k++) {
        PyObject *v = PyDict_GetItemString(d, names[k]);
        Py_ssize_t n;
        const char *text = v && PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &n) : NULL;
        if (!text || n < 1 || n >= IX_NAME_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "rules[index][%s] must be a property name of 1..%d bytes", names[k], IX_NAME_MAX - 1);
            return -1;
        }
        memcpy(into[k], text, n);
        *lens[k] = (size_t)n;
    }
    PyObject *sep = PyDict_GetItemString(d, "separator");
    if (!sep || !PyUnicode_Check(sep) || PyUnicode_GET_LENGTH(sep) != 1 || PyUnicode_READ_CHAR(sep, 0) >= 0x80) {
        PyErr_SetString(PyExc_ValueError, "rules[index][separator] must be one ASCII character");
        return -1;
    }
    ix->separator = (unsigned char)PyUnicode_READ_CHAR(sep, 0);
    ix->blank_magic = (uint32_t)blank;
    ix->transaction_mask = (uint32_t)mask;
    ix->transaction_skip = (uint32_t)skip;
    ix->configured = 1;
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *result_type, *ok, *crc32, *message_type, *rules_dict;
    const char *crc_library = NULL, *crc_symbol = NULL;
    if (!PyArg_ParseTuple(args, "O!OOO!zzO!:configure", &PyType_Type, &result_type, &ok, &crc32, &PyType_Type,
                          &message_type, &crc_library, &crc_symbol, &PyDict_Type, &rules_dict))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)result_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the result type must be a tuple subclass (a NamedTuple)");
        return NULL;
    }
    Rules rules;
    IndexRules index_rules;
    if (read_index_rules(rules_dict, &index_rules) < 0) return NULL;
    if (read_rules(rules_dict, &rules) < 0) return NULL;
    crc32_fn native = NULL;
    if (crc_library && crc_symbol) {
        /* The library is loaded already (crc32 is its Python function): RTLD_NOLOAD only finds it. */
        void *lib = dlopen(crc_library, RTLD_NOW | RTLD_NOLOAD);
        if (lib) native = (crc32_fn)dlsym(lib, crc_symbol);
        if (native) { /* trust it only if it agrees with the Python function */
            static const unsigned char probe[] = "RocketMQ commit log";
            PyObject *data = PyBytes_FromStringAndSize((const char *)probe, sizeof(probe) - 1);
            PyObject *want = data ? PyObject_CallOneArg(crc32, data) : NULL;
            Py_XDECREF(data);
            if (!want) { clear_rules(&rules); return NULL; }
            unsigned long w = PyLong_AsUnsignedLongMask(want);
            Py_DECREF(want);
            if ((w & 0xFFFFFFFFul) != native(0, probe, sizeof(probe) - 1)) native = NULL;
        }
    }
    Py_ssize_t offsets[N_FIELDS];
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)message_type)->tp_dict, *g_names[f]);
        if (!descr || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "the message type must have a __slots__ field %R", *g_names[f]);
            clear_rules(&rules);
            return NULL;
        }
        offsets[f] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    memcpy(g_offsets, offsets, sizeof(offsets));
    Py_INCREF(message_type);
    Py_XSETREF(g_message_type, (PyTypeObject *)message_type);
    g_crc32_native = native;
    clear_rules(&g_rules);
    g_rules = rules;
    g_index = index_rules;
    Py_INCREF(result_type);
    Py_INCREF(ok);
    Py_INCREF(crc32);
    Py_XSETREF(g_result_type, result_type);
    Py_XSETREF(g_ok, ok);
    Py_XSETREF(g_crc32, crc32);
    return PyBool_FromLong(native != NULL);
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_VARARGS, "Validate messages and build their record templates."},
    {"encode_run", encode_run, METH_VARARGS, "Lay out prepared records from a physical offset."},
    {"index_records", index_records, METH_VARARGS,
     "Put the keys of the whole records in a buffer into a message index file (see codec.py)."},
    {"configure", configure, METH_VARARGS,
     "Set the PutResult type, its PUT_OK status, the CRC-32 function, the Message type and the rules (limits, refusals)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_codec", .m_doc = "The store's native codec (see codec.py).", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__codec(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
#define INTERN(var, text) if (!(var = PyUnicode_InternFromString(text))) return NULL
    INTERN(s_topic, "topic");
    INTERN(s_queue_id, "queue_id");
    INTERN(s_body, "body");
    INTERN(s_properties, "properties");
    INTERN(s_flag, "flag");
    INTERN(s_sys_flag, "sys_flag");
    INTERN(s_born_timestamp, "born_timestamp");
    INTERN(s_born_host, "born_host");
    INTERN(s_store_host, "store_host");
    INTERN(s_reconsume_times, "reconsume_times");
    INTERN(s_prepared, "prepared_transaction_offset");
    INTERN(s_max_offset, "max_offset");
    INTERN(s_tags, "TAGS");
    INTERN(s_empty, "");
    INTERN(s_format, "format");
    INTERN(s_size, "size");
#undef INTERN
    if (PyModule_AddIntConstant(m, "ABI", CODEC_ABI) < 0) return NULL;
    return m;
}
