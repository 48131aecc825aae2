//! Actions, resources and privileges, as MongoDB's authorization model
//! defines them.
