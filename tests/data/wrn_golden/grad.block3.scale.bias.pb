Bgrad.block3.scale.biasJ0–R+=†_
=&Z­=Å;DíÉ=<Ê5¼Ä}t½0“¸=ŠµÓ¼pð;¼Ôæ¼ël=