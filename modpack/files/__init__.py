"""Writing files safely, for exports and weight files alike: an anonymous file beside the
output that appears whole or not at all (:mod:`.scratch`), large files handed to the disk as
they are written (:mod:`.write_behind`), a full disk named as such (:mod:`.disk_full`), and a
``.tar`` written member by member, a member in place (:mod:`.tar_writer`)."""
