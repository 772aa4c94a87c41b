"""The media types and annotation keys of modpack's OCI artifacts (docs/format.md, "In a
registry"): modpack's own layer types, the OCI image spec's manifest and index, and the CNCF
ModelPack specification's artifact type, config type and annotations, so that ModelPack tools
(modctl, KitOps) list a pushed library as a model."""

from __future__ import annotations

__all__ = [
    "ANNOTATION_DEVICE",
    "ANNOTATION_FILEPATH",
    "ANNOTATION_ROLE",
    "ANNOTATION_TITLE",
    "ANNOTATION_UNTESTED",
    "ARTIFACT_TYPE",
    "CONFIG",
    "EMPTY_CONFIG",
    "IMAGE_INDEX",
    "IMAGE_MANIFEST",
    "LIBRARY",
    "MANIFEST_TYPES",
    "OMS_BUNDLE",
    "SIGNATURE_ARTIFACT_TYPE",
    "WEIGHTS",
    "WEIGHTS_FOREIGN",
]

IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (IMAGE_MANIFEST, IMAGE_INDEX)

# ModelPack (github.com/modelpack/model-spec): the manifest's artifactType and its config's
# media type. The config holds ModelPack's fields and, under "modpack", what `modpack inspect
# --json` says of the library.
ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG = "application/vnd.cncf.model.config.v1+json"

# modpack's own layers: the library (an ELF shared object, sealed) and its modpack weight
# files; a weight file in another format (safetensors, GGUF) is ModelPack's raw weight layer.
LIBRARY = "application/vnd.modpack.library.v1"
WEIGHTS = "application/vnd.modpack.weights.v1"
WEIGHTS_FOREIGN = "application/vnd.cncf.model.weight.v1.raw"

# The OpenSSF model-signing bundle over the library and its weight files, pushed as a
# referrer (its manifest's subject is the artifact's manifest) with an empty config.
SIGNATURE_ARTIFACT_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
OMS_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"

ANNOTATION_TITLE = "org.opencontainers.image.title"      # the file's name (ORAS names files so)
ANNOTATION_FILEPATH = "org.cncf.model.filepath"          # ModelPack's name for the same
ANNOTATION_UNTESTED = "org.cncf.model.file.mediatype.untested"
ANNOTATION_ROLE = "dev.modpack.role"                     # library | weights | oms-bundle
ANNOTATION_DEVICE = "dev.modpack.device"                 # a variant's device: cuda:sm_90
