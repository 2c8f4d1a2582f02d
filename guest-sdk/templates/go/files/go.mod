module {{name}}

go 1.24

require example.invalid/weir/guest-sdk/go v0.0.0

// The Weir guest SDK, copied into weir-sdk/ by `weir transform init`: that copy pins its version.
replace example.invalid/weir/guest-sdk/go => ./weir-sdk/go
