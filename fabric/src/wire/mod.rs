//! RoCEv2 and PFC wire formats (being written).
