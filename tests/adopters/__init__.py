"""Projects that are not opkiln, adopting kiln (issue 32): fixture projects and the tests that build them."""
