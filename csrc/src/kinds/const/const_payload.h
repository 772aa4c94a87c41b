/* What the rest of the runtime may ask of a const payload without loading it. */
#ifndef MODPACK_KINDS_CONST_PAYLOAD_H_
#define MODPACK_KINDS_CONST_PAYLOAD_H_

#include "modpack/modpack.h"

/* The bytes a const payload needs read before its arrays' data: its header and records. */
uint64_t mp_const_metadata_size(const uint8_t* header, uint64_t payload_size);

/* Where the arrays' data begins in a const payload of |payload_size| bytes, from its first
 * |head_size| bytes (at least mp_const_metadata_size): everything before is metadata (records,
 * shapes, names), everything after is array data. A signed load keeps the metadata in its
 * verified copy and maps the data from the file. MP_ERR_FORMAT when the head does not hold a
 * consistent layout (the caller then keeps the whole payload in the copy). */
mp_status_t mp_const_data_start(const uint8_t* head, uint64_t head_size, uint64_t payload_size,
                                uint64_t* out_start);

#endif /* MODPACK_KINDS_CONST_PAYLOAD_H_ */
