"""Datasets in tar shards (the WebDataset layout): reading, indexing, sampling and packing.

``tar`` finds members; ``index`` groups them into samples and keeps DALI's index of them;
``manifest`` is what ``pack`` writes beside its shards; ``sources`` turns what a user names (a
folder, a manifest, a brace pattern, a list) into shard paths; ``storage`` reads a member by its
offset; ``sampler`` orders an epoch shard by shard; ``dataset`` is :class:`ImageShards`;
``pack`` writes shards.
"""
