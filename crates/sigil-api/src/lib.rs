//! sigil-api: placeholder
