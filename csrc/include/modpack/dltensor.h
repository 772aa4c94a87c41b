/*
 * modpack/dltensor.h — the DLPack tensor ABI that modpack's calling convention uses.
 *
 * Arrays cross every modpack boundary as DLPack `DLTensor`s. The declarations are those of
 * <dlpack/dlpack.h> (DLPack 1.x), which modpack installs beside its own headers; a program that
 * already includes another copy of that header gets the same ABI from whichever comes first.
 */
#ifndef MODPACK_DLTENSOR_H_
#define MODPACK_DLTENSOR_H_

#include "dlpack/dlpack.h"

#endif /* MODPACK_DLTENSOR_H_ */
