//! The built-in lab: namespaces, veth, real transfers.
