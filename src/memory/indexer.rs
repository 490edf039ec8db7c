//! TODO: indexer
