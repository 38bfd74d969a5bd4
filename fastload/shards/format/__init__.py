"""The shard format, with no I/O beyond the files it is given: tar members found and headers
written (``tar``), members grouped into samples and DALI's v1.2 index of them (``index``), a
pack's manifest (``manifest``), which members are a sample's image and target and what a target
member means (``members``), image-text tables read for ``pack`` (``tables``)."""
