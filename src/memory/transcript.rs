//! TODO: transcript
