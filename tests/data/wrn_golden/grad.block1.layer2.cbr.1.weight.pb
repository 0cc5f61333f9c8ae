Bgrad.block1.layer2.cbr.1.weightJ \
=ŸmS½„t=2™;¯uÜ»ÙÖ=ùßŞ:”U=