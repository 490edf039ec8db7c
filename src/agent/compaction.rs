//! TODO: compaction
