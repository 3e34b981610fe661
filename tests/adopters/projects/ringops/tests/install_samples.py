"""What `kiln release-rehearsal` calls after each install of a ringops wheel ([tool.kiln] install-samples)."""

INSTALL_SAMPLES = {
    "ring_shift": "ringops.ring_shift(torch.arange(5.0), 2)",
}
