Bafter3.block6.layer1.cbr.1.biasJ@Ò6ƒ|¹?Ç9°„9nÏ8Ó¢
9-99¥ci¹F9”¤â¹ã>ğ9u1¹¸Œğ	ºUm¡8Ù-J9Îõº9