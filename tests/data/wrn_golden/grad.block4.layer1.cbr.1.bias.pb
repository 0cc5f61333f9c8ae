Bgrad.block4.layer1.cbr.1.biasJ0Z­,¼âÒS»VŸ	;€[¤»¤ÖÃ;ÈÆ»‡2B¼X¢;ø¶‹¸×
Õ;j‹¼2Ã¹»