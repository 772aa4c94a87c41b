"""Other systems' artifacts, read (never run) so that modpack's tools can show them."""
