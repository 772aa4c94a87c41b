/* Every kind the runtime knows, registered: the built-in ones (kinds/builtin.c) and the load
 * layer's own weights kind. Entry points call it before they look anything up. */
#ifndef MODPACK_LOAD_KINDS_H_
#define MODPACK_LOAD_KINDS_H_

void mp_load_register_kinds(void);

#endif /* MODPACK_LOAD_KINDS_H_ */
