/* The format v1 reader: the only code in modpack that interprets `__dev_mblob` bytes.
 *
 * Everything is validated before use — header, index checksum, every count and offset (in
 * subtraction form, so nothing can overflow), the import tree (CSR shape, index ranges,
 * reachability, no cycles) and, unless asked not to, every payload checksum. After
 * mp_blob_parse succeeds, the rest of the runtime can trust the decoded index. */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/blob.h"
#include "core/bytes.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/mapped_read.h"

struct mp_blob {
  mp_const_byte_span_t bytes;
  mp_blob_info_t info;
  mp_blob_module_t* modules; /* module_count entries */
  uint64_t* row_ptr;         /* module_count + 1 */
  uint64_t* child_indices;   /* edge_count */
  char* type_keys;           /* NUL-separated copies, referenced by modules[i].type_key */
  uint32_t* entry_flags;     /* module_count: MP_FORMAT_ENTRY_* */
  mp_const_byte_span_t metadata;  /* format 1.2: in |bytes|' index; {NULL, 0} when absent */
  mp_const_byte_span_t selftests; /* the same */
};

void mp_blob_free(mp_blob_t* blob) {
  if (!blob) return;
  free(blob->modules);
  free(blob->row_ptr);
  free(blob->child_indices);
  free(blob->type_keys);
  free(blob->entry_flags);
  free(blob);
}

static bool is_type_key_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

/* The one type-key rule; the registry and the Python writer use it too. */
bool mp_type_key_is_valid(const char* key, uint64_t size, bool allow_reserved) {
  if (!key || size == 0 || size > MP_FORMAT_MAX_TYPE_KEY) return false;
  for (uint64_t i = 0; i < size; ++i)
    if (!is_type_key_char((uint8_t)key[i])) return false;
  return allow_reserved || key[0] != '_';
}

/* Field offsets, from the on-disk structs of modpack/format.h. */
#define HEADER_FIELD(field) offsetof(mp_format_header_v1_t, field)
#define ENTRY_FIELD(field) offsetof(mp_format_entry_v1_t, field)

/* |available|: the bytes the blob may claim (bytes.size, or more when only its index is given). */
static mp_status_t parse_header(mp_const_byte_span_t bytes, uint64_t available,
                                mp_blob_info_t* h) {
  const uint8_t* p = bytes.data;
  if (bytes.size < MP_FORMAT_HEADER_SIZE)
    return mp_errorf(MP_ERR_FORMAT,
                     "blob truncated: %" PRIu64 " bytes is less than the %d-byte header",
                     bytes.size, MP_FORMAT_HEADER_SIZE);
  if (memcmp(p, MP_FORMAT_MAGIC, MP_FORMAT_MAGIC_SIZE) != 0)
    return mp_errorf(MP_ERR_FORMAT,
                     "not a modpack blob: bad magic bytes (expected 89 4d 50 4b 0d 0a 1a 0a, "
                     "found %02x %02x %02x %02x %02x %02x %02x %02x); the library was not "
                     "written by modpack's export_library, or it is damaged",
                     p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
  h->format_major = mp_load_le16(p + HEADER_FIELD(format_major));
  h->format_minor = mp_load_le16(p + HEADER_FIELD(format_minor));
  uint32_t header_size = mp_load_le32(p + HEADER_FIELD(header_size));
  h->blob_size = mp_load_le64(p + HEADER_FIELD(blob_size));
  h->writer_major = p[HEADER_FIELD(writer_major)];
  h->writer_minor = p[HEADER_FIELD(writer_minor)];
  h->writer_patch = mp_load_le16(p + HEADER_FIELD(writer_patch));
  h->flags = mp_load_le32(p + HEADER_FIELD(flags));
  h->module_count = mp_load_le64(p + HEADER_FIELD(module_count));
  h->edge_count = mp_load_le64(p + HEADER_FIELD(edge_count));
  h->index_size = mp_load_le64(p + HEADER_FIELD(index_size));
  h->index_checksum = mp_load_le64(p + HEADER_FIELD(index_checksum));

  /* The major version comes first: a later major may lay out everything after it anew. */
  if (h->format_major != MP_FORMAT_MAJOR)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "blob format %u.%u cannot be read by this runtime, which reads format %d.x; "
                     "%s (if the library should be format %d, it is damaged: export it again)",
                     h->format_major, h->format_minor, MP_FORMAT_MAJOR,
                     h->format_major > MP_FORMAT_MAJOR ? "upgrade modpack to load it"
                                                       : "re-export it with this modpack version",
                     MP_FORMAT_MAJOR);
  /* Then the checksum, before any size is trusted, so damage is reported as damage. */
  if (header_size < MP_FORMAT_HEADER_SIZE || h->index_size < header_size ||
      h->index_size > bytes.size)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt or truncated blob: index of %" PRIu64
                     " bytes (header %u) does not "
                     "fit in the %" PRIu64 " bytes present",
                     h->index_size, header_size, bytes.size);
  uint64_t actual = mp_index_checksum(p, h->index_size);
  if (actual != h->index_checksum)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob: index checksum mismatch (stored %016" PRIx64
                     ", computed %016" PRIx64 "); the file was damaged after export",
                     h->index_checksum, actual);
  if (h->blob_size > available)
    return mp_errorf(MP_ERR_FORMAT,
                     "blob truncated: its index says %" PRIu64 " bytes but only %" PRIu64
                     " are present",
                     h->blob_size, available);
  if (h->index_size > h->blob_size)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob header: index_size %" PRIu64 " exceeds blob_size %" PRIu64,
                     h->index_size, h->blob_size);
  if (h->flags & ~(uint32_t)MP_FORMAT_KNOWN_FLAGS)
    return mp_errorf(MP_ERR_INCOMPATIBLE,
                     "blob uses unknown flags 0x%x (format %u.%u, written by modpack %u.%u.%u); "
                     "upgrade modpack to load it",
                     h->flags & ~(uint32_t)MP_FORMAT_KNOWN_FLAGS, h->format_major, h->format_minor,
                     h->writer_major, h->writer_minor, h->writer_patch);
  /* Code frames came with format 1.1: a blob that claims an older minor and sets their flag
   * was not written by any modpack (the writer sets both or neither). */
  if ((h->flags & MP_FORMAT_FLAG_CODE_FRAMES) && h->format_minor < MP_FORMAT_MINOR_CODE_FRAMES)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob header: flag 0x%x (code frames) needs format %d.%d, but the "
                     "header says format %u.%u; the file was damaged after export",
                     (unsigned)MP_FORMAT_FLAG_CODE_FRAMES, MP_FORMAT_MAJOR,
                     MP_FORMAT_MINOR_CODE_FRAMES, h->format_major, h->format_minor);
  if (h->module_count == 0)
    return mp_errorf(MP_ERR_FORMAT, "corrupt blob: module_count is 0 (a blob has a root)");
  return MP_OK;
}

/* Verifies the CSR import tree: shape, ranges, every module reachable from the root, and no
 * cycle (iterative DFS with colours, so a deep chain cannot overflow the stack). */
static mp_status_t check_tree(const mp_blob_t* b) {
  uint64_t n = b->info.module_count;
  if (b->row_ptr[0] != 0)
    return mp_errorf(MP_ERR_FORMAT, "corrupt import tree: row_ptr[0] is %" PRIu64 ", not 0",
                     b->row_ptr[0]);
  for (uint64_t i = 0; i < n; ++i) {
    if (b->row_ptr[i + 1] < b->row_ptr[i])
      return mp_errorf(MP_ERR_FORMAT,
                       "corrupt import tree: row_ptr is not monotone at module[%" PRIu64
                       "] (%" PRIu64 " > %" PRIu64 ")",
                       i, b->row_ptr[i], b->row_ptr[i + 1]);
  }
  if (b->row_ptr[n] != b->info.edge_count)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt import tree: row_ptr ends at %" PRIu64 " but there are %" PRIu64
                     " child indices",
                     b->row_ptr[n], b->info.edge_count);
  for (uint64_t e = 0; e < b->info.edge_count; ++e) {
    if (b->child_indices[e] >= n)
      return mp_errorf(MP_ERR_FORMAT,
                       "corrupt import tree: child_indices[%" PRIu64 "] = %" PRIu64
                       " is out of range (%" PRIu64 " modules)",
                       e, b->child_indices[e], n);
  }
  /* colour: 0 unvisited, 1 on the DFS path, 2 done. cursor: next edge to follow. */
  uint8_t* colour = calloc(n, 1);
  uint64_t* stack = malloc(n * sizeof *stack);
  uint64_t* cursor = malloc(n * sizeof *cursor);
  if (!colour || !stack || !cursor) {
    free(colour), free(stack), free(cursor);
    return mp_errorf(MP_ERR_RESOURCE_EXHAUSTED, "out of memory checking a %" PRIu64 "-module tree",
                     n);
  }
  mp_status_t status = MP_OK;
  uint64_t depth = 0;
  stack[depth++] = 0;
  colour[0] = 1;
  cursor[0] = b->row_ptr[0];
  while (depth > 0 && status == MP_OK) {
    uint64_t node = stack[depth - 1];
    if (cursor[node] == b->row_ptr[node + 1]) {
      colour[node] = 2;
      --depth;
      continue;
    }
    uint64_t child = b->child_indices[cursor[node]++];
    if (colour[child] == 1) {
      status = mp_errorf(MP_ERR_FORMAT,
                         "corrupt import tree: module[%" PRIu64 "] imports module[%" PRIu64
                         "], which closes a cycle",
                         node, child);
    } else if (colour[child] == 0) {
      colour[child] = 1;
      cursor[child] = b->row_ptr[child];
      stack[depth++] = child;
    }
  }
  for (uint64_t i = 0; status == MP_OK && i < n; ++i) {
    if (colour[i] == 0)
      status =
          mp_errorf(MP_ERR_FORMAT,
                    "corrupt import tree: module[%" PRIu64 "] is not reachable from the root", i);
  }
  free(colour), free(stack), free(cursor);
  return status;
}

static mp_status_t check_payload_ranges(const mp_blob_t* b);

#define EXTRAS_FIELD(field) (MP_FORMAT_HEADER_SIZE + offsetof(mp_format_header_v1_2_t, field))

/* One region format 1.2's header places in the index (|name|: "metadata", "self-tests"): absent
 * (offset and size 0), or non-empty, within |limit| bytes, at a multiple of 64 and inside the
 * string table's area [strings_at, index_size). */
static mp_status_t parse_extra(const mp_blob_t* b, const char* name, size_t offset_field,
                               size_t size_field, uint64_t limit, uint64_t strings_at,
                               mp_const_byte_span_t* out) {
  const uint8_t* p = b->bytes.data;
  uint64_t offset = mp_load_le64(p + offset_field), size = mp_load_le64(p + size_field);
  uint64_t index_size = b->info.index_size;
  *out = (mp_const_byte_span_t){NULL, 0};
  if (offset == 0 && size == 0) return MP_OK;
  if (size == 0 || size > limit)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob header: %s of %" PRIu64 " bytes at offset %" PRIu64
                     "; a blob holds 1 to %" PRIu64 " bytes of %s, or none (offset and size 0); "
                     "the file was damaged after export",
                     name, size, offset, limit, name);
  if (offset % MP_FORMAT_PAYLOAD_ALIGNMENT != 0 || offset < strings_at || offset > index_size ||
      size > index_size - offset)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob header: %s at [%" PRIu64 ", +%" PRIu64
                     ") is not at a multiple of %d inside the string table's area [%" PRIu64
                     ", %" PRIu64 "); the file was damaged after export",
                     name, offset, size, MP_FORMAT_PAYLOAD_ALIGNMENT, strings_at, index_size);
  *out = (mp_const_byte_span_t){p + offset, size};
  return MP_OK;
}

/* Format 1.2 and later: the metadata and the self-tests, which a header of at least
 * MP_FORMAT_HEADER_SIZE_V1_2 bytes places after the type keys. A blob of an earlier minor has
 * neither, whatever its header_size (a reader of 1.0 skips header bytes it does not know), and
 * so has one whose header is shorter (the fields are there when the header holds them: a later
 * minor need not write them when it has nothing to place). */
static mp_status_t parse_extras(mp_blob_t* b, uint64_t header_size, uint64_t strings_at) {
  const mp_blob_info_t* h = &b->info;
  if (h->format_minor < MP_FORMAT_MINOR_INDEX_EXTRAS || header_size < MP_FORMAT_HEADER_SIZE_V1_2)
    return MP_OK;
  MP_RETURN_IF_ERROR(parse_extra(b, "metadata", EXTRAS_FIELD(metadata_offset),
                                 EXTRAS_FIELD(metadata_size), MP_FORMAT_MAX_METADATA, strings_at,
                                 &b->metadata));
  MP_RETURN_IF_ERROR(parse_extra(b, "self-tests", EXTRAS_FIELD(selftests_offset),
                                 EXTRAS_FIELD(selftests_size), MP_FORMAT_MAX_SELFTESTS,
                                 strings_at, &b->selftests));
  const mp_const_byte_span_t* m = &b->metadata;
  const mp_const_byte_span_t* t = &b->selftests;
  if (m->size && t->size && m->data < t->data + t->size && t->data < m->data + m->size)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob header: metadata at [%" PRIu64 ", +%" PRIu64
                     ") and self-tests at [%" PRIu64 ", +%" PRIu64
                     ") overlap; the file was damaged after export",
                     (uint64_t)(m->data - b->bytes.data), m->size,
                     (uint64_t)(t->data - b->bytes.data), t->size);
  return MP_OK;
}

static mp_status_t parse_index(mp_blob_t* b, uint32_t flags) {
  const uint8_t* p = b->bytes.data;
  const mp_blob_info_t* h = &b->info;
  uint64_t header_size = mp_load_le32(p + HEADER_FIELD(header_size));
  uint64_t n = h->module_count, e = h->edge_count;
  uint64_t avail = h->index_size - header_size;

  /* Size the fixed tables with checked arithmetic against what the index holds. */
  if (n > avail / MP_FORMAT_ENTRY_SIZE)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob: %" PRIu64 " module entries do not fit in a %" PRIu64
                     "-byte index",
                     n, h->index_size);
  uint64_t entries_size = n * MP_FORMAT_ENTRY_SIZE;
  avail -= entries_size;
  if (n + 1 > avail / 8)
    return mp_errorf(MP_ERR_FORMAT, "corrupt blob: row_ptr of %" PRIu64 " entries does not fit",
                     n + 1);
  avail -= (n + 1) * 8;
  if (e > avail / 8)
    return mp_errorf(MP_ERR_FORMAT,
                     "corrupt blob: %" PRIu64 " child indices do not fit in the index", e);
  avail -= e * 8;
  uint64_t entries_at = header_size;
  uint64_t row_ptr_at = entries_at + entries_size;
  uint64_t children_at = row_ptr_at + (n + 1) * 8;
  uint64_t strings_at = children_at + e * 8;
  uint64_t strings_size = avail;
  MP_RETURN_IF_ERROR(parse_extras(b, header_size, strings_at));

  b->modules = calloc(n, sizeof *b->modules);
  b->row_ptr = malloc((n + 1) * sizeof *b->row_ptr);
  b->child_indices = malloc((e ? e : 1) * sizeof *b->child_indices);
  /* Each key is at most MP_FORMAT_MAX_TYPE_KEY bytes plus its NUL. */
  uint64_t keys_capacity = n * (MP_FORMAT_MAX_TYPE_KEY + 1);
  b->type_keys = malloc(keys_capacity);
  b->entry_flags = calloc(n, sizeof *b->entry_flags);
  if (!b->modules || !b->row_ptr || !b->child_indices || !b->type_keys || !b->entry_flags)
    return mp_out_of_memory("the blob's index");

  for (uint64_t i = 0; i <= n; ++i) b->row_ptr[i] = mp_load_le64(p + row_ptr_at + 8 * i);
  for (uint64_t k = 0; k < e; ++k) b->child_indices[k] = mp_load_le64(p + children_at + 8 * k);

  uint64_t lib_count = 0;
  char* key_out = b->type_keys;
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* q = p + entries_at + i * MP_FORMAT_ENTRY_SIZE;
    mp_blob_module_t* m = &b->modules[i];
    m->payload_offset = mp_load_le64(q + ENTRY_FIELD(payload_offset));
    m->payload_size = mp_load_le64(q + ENTRY_FIELD(payload_size));
    m->payload_checksum = mp_load_le64(q + ENTRY_FIELD(payload_checksum));
    uint32_t key_offset = mp_load_le32(q + ENTRY_FIELD(type_key_offset));
    uint32_t key_size = mp_load_le32(q + ENTRY_FIELD(type_key_size));
    uint32_t entry_flags = mp_load_le32(q + ENTRY_FIELD(flags));
    /* Entry flags have a meaning only in a blob whose header announces them. */
    uint32_t allowed =
        (h->flags & MP_FORMAT_FLAG_CODE_FRAMES) ? (uint32_t)MP_FORMAT_KNOWN_ENTRY_FLAGS : 0u;
    if ((entry_flags & ~allowed) != 0 || mp_load_le32(q + ENTRY_FIELD(reserved0)) != 0 ||
        mp_load_le64(q + ENTRY_FIELD(reserved1)) != 0)
      return mp_errorf(MP_ERR_FORMAT,
                       "corrupt blob: module[%" PRIu64 "] has non-zero reserved fields", i);
    b->entry_flags[i] = entry_flags;
    if (key_size == 0 || key_size > MP_FORMAT_MAX_TYPE_KEY || key_offset > strings_size ||
        key_size > strings_size - key_offset)
      return mp_errorf(MP_ERR_FORMAT,
                       "corrupt blob: module[%" PRIu64
                       "] type key (offset %u, size %u) is outside "
                       "the %" PRIu64 "-byte string table or longer than %d bytes",
                       i, key_offset, key_size, strings_size, MP_FORMAT_MAX_TYPE_KEY);
    const uint8_t* key = p + strings_at + key_offset;
    for (uint32_t c = 0; c < key_size; ++c) {
      if (!is_type_key_char(key[c]))
        return mp_errorf(MP_ERR_FORMAT,
                         "corrupt blob: module[%" PRIu64
                         "] type key has a byte 0x%02x that is not "
                         "allowed in a type key",
                         i, key[c]);
    }
    memcpy(key_out, key, key_size);
    key_out[key_size] = '\0';
    m->type_key = key_out;
    key_out += key_size + 1;
    m->first_edge = 0;
    m->child_count = 0;

    if (strcmp(m->type_key, MP_LIB_TYPE_KEY) == 0) {
      ++lib_count;
      if (m->payload_size != 0 || m->payload_offset != 0 || m->payload_checksum != 0 ||
          entry_flags != 0)
        return mp_errorf(MP_ERR_FORMAT,
                         "corrupt blob: module[%" PRIu64 "] is \"_lib\" but has a payload", i);
      continue;
    }
    if (m->payload_offset % MP_FORMAT_PAYLOAD_ALIGNMENT != 0)
      return mp_errorf(MP_ERR_FORMAT,
                       "corrupt blob: module[%" PRIu64 "] payload offset %" PRIu64
                       " is not a multiple of %d",
                       i, m->payload_offset, MP_FORMAT_PAYLOAD_ALIGNMENT);
    if (m->payload_offset < h->index_size || m->payload_offset > h->blob_size ||
        m->payload_size > h->blob_size - m->payload_offset)
      return mp_errorf(MP_ERR_FORMAT,
                       "corrupt blob: module[%" PRIu64 "] payload [%" PRIu64 ", +%" PRIu64
                       ") is outside the payload area [%" PRIu64 ", %" PRIu64 ")",
                       i, m->payload_offset, m->payload_size, h->index_size, h->blob_size);
  }
  if (lib_count > 1)
    return mp_errorf(MP_ERR_FORMAT, "corrupt blob: %" PRIu64 " \"_lib\" entries (at most one)",
                     lib_count);
  MP_RETURN_IF_ERROR(check_payload_ranges(b));

  MP_RETURN_IF_ERROR(check_tree(b));
  for (uint64_t i = 0; i < n; ++i) {
    b->modules[i].first_edge = b->row_ptr[i];
    b->modules[i].child_count = b->row_ptr[i + 1] - b->row_ptr[i];
  }

  if (!(flags & MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)) return mp_blob_verify_payloads(b);
  return MP_OK;
}

/* Payloads lie in index order, each after the one before it, or exactly where an earlier one
 * lies (identical payloads are stored once). Overlapping or nested ranges are refused, so that
 * checking the payloads reads each byte once: validation takes time linear in the file, where
 * thousands of nested ranges would take time quadratic in it. */
static mp_status_t check_payload_ranges(const mp_blob_t* b) {
  uint64_t n = b->info.module_count, count = 0, end = 0;
  const mp_blob_module_t** ranges = malloc((n ? n : 1) * sizeof *ranges); /* by offset */
  if (!ranges) return mp_out_of_memory("the payload ranges");
  mp_status_t status = MP_OK;
  for (uint64_t i = 0; i < n && status == MP_OK; ++i) {
    const mp_blob_module_t* m = &b->modules[i];
    if (m->payload_offset == 0) continue; /* "_lib" */
    if (m->payload_offset >= end) {
      ranges[count++] = m;
      end = m->payload_offset + m->payload_size;
      continue;
    }
    uint64_t low = 0, high = count; /* the earlier range starting where this one does */
    while (low < high) {
      uint64_t mid = low + (high - low) / 2;
      if (ranges[mid]->payload_offset < m->payload_offset)
        low = mid + 1;
      else
        high = mid;
    }
    const mp_blob_module_t* same = low < count ? ranges[low] : NULL;
    if (!same || same->payload_offset != m->payload_offset ||
        same->payload_size != m->payload_size || same->payload_checksum != m->payload_checksum)
      status = mp_errorf(MP_ERR_FORMAT,
                         "corrupt blob: module[%" PRIu64 "] payload [%" PRIu64 ", +%" PRIu64
                         ") overlaps an earlier payload without being the same: payloads "
                         "are disjoint and in index order, or shared whole",
                         i, m->payload_offset, m->payload_size);
  }
  free(ranges);
  return status;
}

static int compare_offsets(const void* a, const void* b) {
  const mp_blob_module_t* x = *(const mp_blob_module_t* const*)a;
  const mp_blob_module_t* y = *(const mp_blob_module_t* const*)b;
  if (x->payload_offset != y->payload_offset) return x->payload_offset < y->payload_offset ? -1 : 1;
  return x->payload_size < y->payload_size ? -1 : x->payload_size > y->payload_size;
}

/* Where a blob's bytes come from, for their holes (mp_blob_verify_payloads_in_file). */
typedef struct {
  int fd;
  uint64_t offset;
} backing_t;

/* The first non-zero byte in [begin, end) of the blob, or |end|; holes of its file skipped. */
static uint64_t first_nonzero(const mp_blob_t* b, backing_t file, uint64_t begin, uint64_t end) {
  for (uint64_t piece = begin; piece < end; piece += MP_ZEROS_SIZE) {
    uint64_t n = end - piece < MP_ZEROS_SIZE ? end - piece : MP_ZEROS_SIZE;
    if (mp_file_is_hole(file.fd, file.offset + piece, n) ||
        memcmp(b->bytes.data + piece, mp_zeros(), (size_t)n) == 0)
      continue;
    for (uint64_t i = piece;; ++i)
      if (b->bytes.data[i] != 0) return i;
  }
  return end;
}

/* Bytes between payloads (alignment padding) are written as zeros. They are outside the seal
 * (which skips the payload range) and outside every payload checksum, so they are checked here:
 * damage there is damage like any other, not something to load past. */
static mp_status_t check_padding(const mp_blob_t* b, backing_t file, uint64_t begin,
                                 uint64_t end) {
  uint64_t at = first_nonzero(b, file, begin, end);
  if (at == end) return MP_OK;
  return mp_errorf(MP_ERR_FORMAT,
                   "corrupt blob: byte %" PRIu64
                   " of the blob, in the padding between "
                   "payloads [%" PRIu64 ", %" PRIu64
                   "), is %u where zero was written; the "
                   "file was damaged after export",
                   at, begin, end, (unsigned)b->bytes.data[at]);
}

mp_status_t mp_blob_verify_payloads(const mp_blob_t* b) {
  return mp_blob_verify_payloads_in_file(b, -1, 0);
}

mp_status_t mp_blob_verify_payloads_in_file(const mp_blob_t* b, int fd, uint64_t file_offset) {
  if (!(b->info.flags & MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS)) return MP_OK;
  backing_t file = {fd, file_offset};
  uint64_t n = b->info.module_count;
  /* Identical payloads are stored once: hash each distinct range once, in file order. */
  const mp_blob_module_t** order = malloc(n * sizeof *order);
  if (!order) return mp_out_of_memory("the payload order");
  uint64_t count = 0;
  for (uint64_t i = 0; i < n; ++i)
    if (b->modules[i].payload_offset != 0) order[count++] = &b->modules[i];
  qsort(order, count, sizeof *order, compare_offsets);
  mp_status_t status = MP_OK;
  uint64_t cursor = b->info.index_size; /* the end of the bytes checked so far */
  for (uint64_t k = 0; k < count && status == MP_OK; ++k) {
    const mp_blob_module_t* m = order[k];
    if (k > 0 && order[k - 1]->payload_offset == m->payload_offset &&
        order[k - 1]->payload_size == m->payload_size &&
        order[k - 1]->payload_checksum == m->payload_checksum)
      continue;
    if (m->payload_offset > cursor) {
      status = check_padding(b, file, cursor, m->payload_offset);
      if (status != MP_OK) break;
    }
    if (m->payload_offset + m->payload_size > cursor) cursor = m->payload_offset + m->payload_size;
    mp_const_byte_span_t payload = {b->bytes.data + m->payload_offset, m->payload_size};
    uint64_t actual = mp_checksum_mapped_file(payload, fd, file_offset + m->payload_offset);
    if (actual != m->payload_checksum)
      status = mp_errorf(MP_ERR_FORMAT,
                         "corrupt blob: module[%" PRIu64
                         "] (%s) payload checksum mismatch "
                         "(stored %016" PRIx64 ", computed %016" PRIx64
                         "); the file was damaged after export",
                         (uint64_t)(m - b->modules), m->type_key, m->payload_checksum, actual);
  }
  if (status == MP_OK && cursor < b->info.blob_size)
    status = check_padding(b, file, cursor, b->info.blob_size);
  free(order);
  return status;
}

static mp_status_t parse(mp_const_byte_span_t bytes, uint64_t available, uint32_t flags,
                         mp_blob_t** out_blob) {
  *out_blob = NULL;
  if (!bytes.data) return mp_errorf(MP_ERR_INVALID_ARGUMENT, "mp_blob_parse: no bytes given");
  mp_blob_t* b = calloc(1, sizeof *b);
  if (!b) return mp_out_of_memory("a blob");
  b->bytes = bytes;
  mp_status_t status = parse_header(bytes, available, &b->info);
  if (status == MP_OK) status = parse_index(b, flags);
  if (status != MP_OK) {
    mp_blob_free(b);
    return status;
  }
  *out_blob = b;
  return MP_OK;
}

mp_status_t mp_blob_parse(mp_const_byte_span_t bytes, uint32_t flags, mp_blob_t** out_blob) {
  return parse(bytes, bytes.size, flags, out_blob);
}

mp_status_t mp_blob_parse_index(mp_const_byte_span_t index, uint64_t available,
                                mp_blob_t** out_blob) {
  return parse(index, available, MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, out_blob);
}

void mp_blob_info(const mp_blob_t* blob, mp_blob_info_t* out_info) {
  *out_info = blob->info;
}

mp_status_t mp_blob_module(const mp_blob_t* blob, uint64_t index, mp_blob_module_t* out_module) {
  if (index >= blob->info.module_count)
    return mp_errorf(MP_ERR_INVALID_ARGUMENT,
                     "module index %" PRIu64 " out of range (%" PRIu64 " modules)", index,
                     blob->info.module_count);
  *out_module = blob->modules[index];
  return MP_OK;
}

uint32_t mp_blob_module_flags(const mp_blob_t* blob, uint64_t index) {
  return index < blob->info.module_count ? blob->entry_flags[index] : 0;
}

void mp_blob_metadata(const mp_blob_t* blob, mp_const_byte_span_t* out_metadata) {
  *out_metadata = blob->metadata;
}

void mp_blob_selftests(const mp_blob_t* blob, mp_const_byte_span_t* out_selftests) {
  *out_selftests = blob->selftests;
}

uint64_t mp_blob_child(const mp_blob_t* blob, uint64_t edge) {
  return edge < blob->info.edge_count ? blob->child_indices[edge] : UINT64_MAX;
}
