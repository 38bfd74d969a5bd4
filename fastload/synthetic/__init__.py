"""Stand-ins for real data, for benchmarks and demos that must not download anything.

:func:`make_image_folder` makes ImageNet-like JPEG folders; :func:`make_coco` a COCO-like
detection set of such pictures with boxes and polygons; :func:`make_voc` a segmentation set in
VOC's layout of the same pictures and polygons. The images are not photos, but they
are shaped like ImageNet's: shorter side 300-500 px, aspect 0.75-1.33, JPEG quality 85-96, about
one in ten progressive, smooth shapes with camera-like grain so that files weigh 60-120 KB and
decode at the speed real photos do.

:func:`default_data` is the set every command and benchmark uses when given no folder: made
once with :func:`make_image_folder` and kept in fastload's cache folder.

:class:`SlowStorage` makes any dataset wait like network storage before each sample.
"""

from fastload.synthetic.detection import make_coco, make_voc
from fastload.synthetic.photos import DEFAULT_IMAGES, default_data, default_root, make_image_folder
from fastload.synthetic.storage import SlowStorage

__all__ = [
    "DEFAULT_IMAGES",
    "SlowStorage",
    "default_data",
    "default_root",
    "make_coco",
    "make_image_folder",
    "make_voc",
]
