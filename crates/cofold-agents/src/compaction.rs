//! compaction: to be written.
