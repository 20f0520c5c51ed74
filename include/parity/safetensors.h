/* safetensors.h - read and write Hugging Face .safetensors files.
 *
 * parity dumps every tensor it checks (golden runs, layouts, other
 * backends) in this format so that any tool can read them. Layout:
 *
 *   [8 bytes]  N, the header length, unsigned little-endian
 *   [N bytes]  JSON header: {"__metadata__": {str: str, ...},   (optional)
 *                            "<name>": {"dtype": "F32",
 *                                       "shape": [2, 3],
 *                                       "data_offsets": [begin, end]}, ...}
 *   [rest]     the data buffer; offsets are relative to its start,
 *              elements little-endian, row-major.
 *
 * st_open enforces the format's rules as the reference implementation
 * does, and rejects anything else with a message naming the file, the
 * tensor and the field:
 *   - 2 <= N <= 100,000,000 and 8 + N <= file size; the header is a JSON
 *     object (leading '{'; trailing spaces are allowed, as padding);
 *   - every entry has exactly dtype, shape and data_offsets; dtype is one
 *     of the names below; shape entries are integers >= 0; at most
 *     ST_MAX_DIMS dims (a parity limit);
 *   - 0 <= begin <= end <= buffer size and end - begin equals
 *     numel * dtype size (a 0-d tensor has numel 1);
 *   - tensors sorted by offset tile the buffer exactly: no overlap, no
 *     gap, and the last one ends at the end of the file. (The reference
 *     implementation rejects gaps too, so parity does not merely warn.)
 *   - __metadata__, when present, maps strings to strings (or is null).
 *   - unknown fields in a tensor entry are an error (a typo such as
 *     "data_offset" must not pass silently).
 *
 * Alignment: the data buffer is copied to its own malloc'd block, so
 * st_data is aligned to the element size whenever begin is a multiple of
 * it. Files from Hugging Face's writer, and from st_writer when tensors
 * are added in order of decreasing element size, always satisfy this;
 * for others use memcpy rather than casting the pointer.
 *
 * Byte order: st_data and st_writer_add use host order. On a big-endian
 * host the reader and writer swap elements (that path is compiled only
 * there and untested; every machine parity runs on is little-endian).
 */
#ifndef PARITY_SAFETENSORS_H
#define PARITY_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "parity/error.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER 100000000ull

/* The first nine are the ones parity produces; the rest are read so that
 * any Hugging Face file can be diffed. */
typedef enum {
    ST_F32, ST_F64, ST_I32, ST_I64, ST_U8, ST_I8, ST_F16, ST_BF16, ST_BOOL,
    ST_I16, ST_U16, ST_U32, ST_U64, ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
} st_dtype_t;

typedef struct {
    const char *name;
    st_dtype_t dtype;
    int ndim;                    /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];  /* row-major */
    uint64_t begin, end;         /* byte offsets into the data buffer */
} st_tensor_t;

typedef struct st_file st_file_t;

/* Reads the whole file and validates it (see above). NULL + message on
 * any error. */
st_file_t *st_open(const char *path, perr_t *err);
/* The same, with the data buffer mapped from the file (page cache the
 * kernel can drop again, not the process's own memory): a check's
 * spilled golden run. */
st_file_t *st_open_mapped(const char *path, perr_t *err);
void st_close(st_file_t *f);

size_t st_count(const st_file_t *f);
const st_tensor_t *st_tensor(const st_file_t *f, size_t i); /* header order */
const st_tensor_t *st_find(const st_file_t *f, const char *name); /* NULL if absent */
const void *st_data(const st_file_t *f, const st_tensor_t *t);   /* end - begin bytes */
const char *st_metadata(const st_file_t *f, const char *key);    /* NULL if absent */
size_t st_metadata_count(const st_file_t *f);
const char *st_metadata_key_at(const st_file_t *f, size_t i);    /* header order */
const char *st_path(const st_file_t *f);

/* Writes s into buf (cap bytes, cap >= 4) with every byte that could
 * drive a terminal escaped as \xHH: C0 controls, DEL, and the two-byte
 * UTF-8 form of the C1 controls (U+0080..U+009F). Anything read from a
 * file (a tensor name, a metadata key, a dtype) is printed through it.
 * A string too long for buf ends in "..."; returns buf. ST_ESCAPE_CAP(n)
 * is enough for a string of n bytes. */
#define ST_ESCAPE_CAP(n) (4 * (size_t)(n) + 1)
char *st_escape(const char *s, char *buf, size_t cap);

uint64_t st_numel(const st_tensor_t *t);
size_t st_dtype_size(st_dtype_t dt);        /* bytes per element; 0 if invalid */
const char *st_dtype_name(st_dtype_t dt);   /* "F32", ...; "?" if invalid */
/* Parses a dtype name ("F32"); -1 if unknown. */
int st_dtype_from_name(const char *name, st_dtype_t *out);
int st_dtype_is_float(st_dtype_t dt);

/* Builds a file in memory, then writes it in one go. */
typedef struct st_writer st_writer_t;
st_writer_t *st_writer_new(void);          /* NULL only when out of memory */
/* Copies numel * dtype size bytes from data (which may be NULL when
 * numel is 0). Errors: duplicate or reserved name, ndim outside
 * [0, ST_MAX_DIMS], negative dim, byte count overflow. */
int st_writer_add(st_writer_t *w, const char *name, st_dtype_t dt, int ndim,
                  const int64_t *shape, const void *data, perr_t *err);
/* Sets (or replaces) one __metadata__ entry. */
int st_writer_set_metadata(st_writer_t *w, const char *key, const char *value, perr_t *err);
/* Tensors in insertion order, packed with no gaps; the header is padded
 * with spaces so that the data starts at a multiple of 8 bytes, as
 * Hugging Face's writer does. */
int st_writer_save(const st_writer_t *w, const char *path, perr_t *err);
/* A scratch file (a check's spilled golden run): written in place, with
 * no temporary file, rename or fsync; the path must not exist. */
int st_writer_save_scratch(const st_writer_t *w, const char *path, perr_t *err);
void st_writer_free(st_writer_t *w);
/* Reading back what was added, in insertion order, without a file: the
 * equivalence checker compares two runs' dumps in memory. */
size_t st_writer_count(const st_writer_t *w);
/* Fills *t (t->name points into the writer; begin = 0, end = byte size)
 * and returns the tensor's bytes; NULL if i is out of range. */
const void *st_writer_tensor(const st_writer_t *w, size_t i, st_tensor_t *t);
/* Index of the tensor named name, or -1. */
long st_writer_find(const st_writer_t *w, const char *name);

#endif
