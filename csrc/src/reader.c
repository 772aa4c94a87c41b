/* A bounds-checked cursor over untrusted payload bytes. Every read checks what remains (in
 * subtraction form) before touching memory. */
#include <inttypes.h>

#include "internal.h"

bool mp_read_bytes(mp_reader_t* r, uint64_t n, const uint8_t** out) {
  if (r->pos > r->size || n > r->size - r->pos) return false;
  *out = r->data + r->pos;
  r->pos += n;
  return true;
}

bool mp_read_u8(mp_reader_t* r, uint8_t* out) {
  const uint8_t* p;
  if (!mp_read_bytes(r, 1, &p)) return false;
  *out = p[0];
  return true;
}

bool mp_read_u32(mp_reader_t* r, uint32_t* out) {
  const uint8_t* p;
  if (!mp_read_bytes(r, 4, &p)) return false;
  *out = mp_load_le32(p);
  return true;
}

bool mp_read_u64(mp_reader_t* r, uint64_t* out) {
  const uint8_t* p;
  if (!mp_read_bytes(r, 8, &p)) return false;
  *out = mp_load_le64(p);
  return true;
}

mp_status_t mp_reader_error(const mp_reader_t* r, const char* field) {
  return mp_errorf(MP_ERR_FORMAT,
                   "%s truncated or corrupt: cannot read %s at byte %" PRIu64 " of %" PRIu64,
                   r->what, field, r->pos, r->size);
}
